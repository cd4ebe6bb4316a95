"""A deterministic PyTorch training job for the GPU tests: a small
transformer with AdamW and an extra 1 GiB device buffer (the workload of
DESIGN.md, scaled by TORCH_PARAMS_M / TORCH_BUFFER_GIB). Speaks the test
protocol on stdin/stdout:
  ready                     printed once the model is on the GPU
  train N -> trained        N more steps; losses as exact float64 hex
  quit -> bye
Every loss is printed as float.hex(), so runs compare bit for bit."""
import json
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402

torch.manual_seed(1234)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

dev = torch.device("cuda")
params_m = float(os.environ.get("TORCH_PARAMS_M", "20"))
d_model = 512
layers = max(1, int(params_m * 1e6 / (12 * d_model * d_model)))
model = torch.nn.TransformerEncoder(
    torch.nn.TransformerEncoderLayer(d_model, 8, 4 * d_model, dropout=0.0, batch_first=True), layers
).to(dev)
head = torch.nn.Linear(d_model, 1000).to(dev)
opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=3e-4)
extra = torch.empty(int(float(os.environ.get("TORCH_BUFFER_GIB", "1")) * (1 << 30)) // 4, device=dev).normal_()
gen = torch.Generator(device=dev).manual_seed(99)
step = 0


def train_step():
    global step
    x = torch.randn(16, 64, d_model, device=dev, generator=gen)
    y = torch.randint(0, 1000, (16, 64), device=dev, generator=gen)
    loss = torch.nn.functional.cross_entropy(head(model(x)).flatten(0, 1), y.flatten())
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()
    extra.mul_(0.999).add_(loss.detach())  # the buffer is part of the state too
    step += 1
    return float(loss.item())


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
        losses = [train_step().hex() for _ in range(int(cmd[1]))]
        torch.cuda.synchronize()
        say({"event": "trained", "step": step, "losses": losses, "extra": float(extra.sum().item()).hex()})
    elif cmd[0] == "quit":
        say({"event": "bye"})
        break
    else:
        say({"event": "error", "reason": "unknown command"})
