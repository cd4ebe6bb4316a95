"""A deterministic PyTorch training job for the GPU tests: a small
transformer with AdamW and an extra 1 GiB device buffer (the workload of
DESIGN.md, scaled by TORCH_PARAMS_M / TORCH_BUFFER_GIB). Speaks the test
protocol on stdin/stdout:
  ready                     printed once the model is on the GPU
  train N -> trained        N more steps; losses as exact float64 hex
  listen -> socket          a TCP socket listening on 127.0.0.1
  connect PATH -> socket    a Unix stream connection to PATH
  close -> closed           those sockets closed
  memory -> memory          torch.cuda.memory_allocated() and _reserved()
  quit -> bye
Every loss is printed as float.hex(), so runs compare bit for bit.

The shapes users run, chosen by the environment:
  TORCH_WORKERS=N      batches come from a DataLoader with N worker
                       processes (the default fork start method, pinned
                       memory), forked after CUDA started
  TORCH_SPAWN_CHILD=1  a child started with multiprocessing's spawn method
                       keeps a tensor on the GPU and updates it each step;
                       its checksum joins every loss"""
import json
import os
import socket
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

d_model = 512


class Batches(torch.utils.data.Dataset):
    """Batch i, the same whichever process makes it."""

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(1000 + i)
        return torch.randn(16, 64, d_model, generator=g), torch.randint(0, 1000, (16, 64), generator=g)


def spawned_child(conn):
    """Spawned (not forked): its own CUDA context, under the shim it inherits."""
    state = torch.arange(1 << 20, dtype=torch.float64, device="cuda")
    while True:
        msg = conn.recv()
        if msg == "quit":
            break
        state.mul_(1.0001).add_(float(msg))
        conn.send(float(state.sum().item()).hex())


def main():
    torch.manual_seed(1234)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    dev = torch.device("cuda")
    params_m = float(os.environ.get("TORCH_PARAMS_M", "20"))
    layers = max(1, int(params_m * 1e6 / (12 * d_model * d_model)))
    model = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d_model, 8, 4 * d_model, dropout=0.0, batch_first=True), layers
    ).to(dev)
    head = torch.nn.Linear(d_model, 1000).to(dev)
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=3e-4)
    extra = torch.empty(int(float(os.environ.get("TORCH_BUFFER_GIB", "1")) * (1 << 30)) // 4, device=dev).normal_()
    gen = torch.Generator(device=dev).manual_seed(99)
    workers = int(os.environ.get("TORCH_WORKERS", "0"))
    loader = (
        iter(torch.utils.data.DataLoader(Batches(), batch_size=None, num_workers=workers, pin_memory=True, prefetch_factor=2))
        if workers
        else None
    )
    child = None
    if os.environ.get("TORCH_SPAWN_CHILD") == "1":
        ctx = mp.get_context("spawn")
        conn, child_end = ctx.Pipe()
        child = (ctx.Process(target=spawned_child, args=(child_end,), daemon=True), conn)
        child[0].start()
    held = []
    step = 0

    def train_step():
        nonlocal step
        if loader:
            x, y = (t.to(dev, non_blocking=True) for t in next(loader))
        else:
            x = torch.randn(16, 64, d_model, device=dev, generator=gen)
            y = torch.randint(0, 1000, (16, 64), device=dev, generator=gen)
        loss = torch.nn.functional.cross_entropy(head(model(x)).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        extra.mul_(0.999).add_(loss.detach())  # the buffer is part of the state too
        step += 1
        value = float(loss.item()).hex()
        if child:
            child[1].send(step)
            value += "/" + child[1].recv()
        return value

    def say(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    nparams = sum(p.numel() for p in model.parameters()) + sum(p.numel() for p in head.parameters())
    say({"event": "ready", "pid": os.getpid(), "params": nparams, "buffers": []})
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "train":
            losses = [train_step() for _ in range(int(cmd[1]))]
            torch.cuda.synchronize()
            say({"event": "trained", "step": step, "losses": losses, "extra": float(extra.sum().item()).hex()})
        elif cmd[0] == "listen":
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen()
            held.append(s)
            say({"event": "socket", "port": s.getsockname()[1]})
        elif cmd[0] == "connect":
            s = socket.socket(socket.AF_UNIX)
            s.connect(cmd[1])
            held.append(s)
            say({"event": "socket", "path": cmd[1]})
        elif cmd[0] == "memory":
            say({"event": "memory", "allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()})
        elif cmd[0] == "close":
            while held:
                held.pop().close()
            say({"event": "closed"})
        elif cmd[0] == "quit":
            if child:
                child[1].send("quit")
                child[0].join()
            say({"event": "bye"})
            break
        else:
            say({"event": "error", "reason": "unknown command"})


if __name__ == "__main__":
    main()
