"""Whether the driver's copy of a process's device state shrinks when the
context's local memory is made small before the driver's checkpoint. The
driver reserves local memory (stack) for every thread the GPU can hold,
and its checkpoint copies all of it to host memory; kernels with large
stack frames grow it, and it never shrinks on its own.

A child trains a small transformer a few steps (and, with NCCL, runs an
all-reduce on a one-rank group), then optionally sets
cuCtxSetLimit(STACK_SIZE) to 16 bytes, and waits; the parent locks,
checkpoints, restores and unlocks it with the driver's API, timing each
step and reading the child's resident memory before and after the
checkpoint; the child sets the limit it had again and trains on. Run on a
GPU host:
    python3 test/gpu/probes/lmem_shrink.py
"""
import ctypes
import os
import subprocess
import sys
import time

STACK = 0  # CU_LIMIT_STACK_SIZE


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def child(shrink, nccl):
    import torch
    import torch.nn as nn

    cuda = ctypes.CDLL("libcuda.so.1")
    torch.manual_seed(0)
    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True), 8).cuda()
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(16, 256, 512, device="cuda")

    def step():
        opt.zero_grad()
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(3):
        step()
    if nccl:
        import torch.distributed as dist

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29000 + os.getpid() % 1000), RANK="0", WORLD_SIZE="1")
        dist.init_process_group("nccl", device_id=torch.device("cuda:0"))
        t = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
    torch.cuda.synchronize()
    free0, total = torch.cuda.mem_get_info()
    limit = ctypes.c_size_t()
    cuda.cuCtxGetLimit(ctypes.byref(limit), STACK)
    line = f"stack limit {limit.value} B, GPU used {(total - free0) / 2**20:.0f} MiB"
    if shrink:
        t0 = time.perf_counter()
        rc = cuda.cuCtxSetLimit(STACK, 16)
        free1, _ = torch.cuda.mem_get_info()
        line += f"; cuCtxSetLimit(16) rc={rc} in {time.perf_counter() - t0:.4f} s, GPU used {(total - free1) / 2**20:.0f} MiB"
    print(line, flush=True)
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    if shrink:
        rc = cuda.cuCtxSetLimit(STACK, limit.value)
        print(f"limit set back: rc={rc} in {time.perf_counter() - t0:.4f} s", flush=True)
    loss = step()
    torch.cuda.synchronize()
    free2, _ = torch.cuda.mem_get_info()
    print(f"after restore: a step in {time.perf_counter() - t0:.3f} s, loss {loss:.6f}, GPU used {(total - free2) / 2**20:.0f} MiB", flush=True)
    if nccl:
        t = torch.ones(1 << 20, device="cuda")
        torch.distributed.all_reduce(t)
        torch.cuda.synchronize()
        torch.distributed.destroy_process_group()


def parent():
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuInit(0)
    for nccl in (False, True):
        for shrink in (False, True):
            p = subprocess.Popen([sys.executable, __file__, "child", str(int(shrink)), str(int(nccl))], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            head = []
            while True:
                line = p.stdout.readline()
                if not line or line.strip() == "ready":
                    break
                head.append(line.strip())
            r0 = rss_mib(p.pid)
            t = [time.perf_counter()]
            rcs = [cuda.cuCheckpointProcessLock(p.pid, None)]
            t.append(time.perf_counter())
            rcs.append(cuda.cuCheckpointProcessCheckpoint(p.pid, None))
            t.append(time.perf_counter())
            r1 = rss_mib(p.pid)
            rcs.append(cuda.cuCheckpointProcessRestore(p.pid, None))
            t.append(time.perf_counter())
            rcs.append(cuda.cuCheckpointProcessUnlock(p.pid, None))
            t.append(time.perf_counter())
            p.stdin.write("go\n")
            p.stdin.flush()
            tail = p.stdout.read().strip()
            p.wait()
            d = [t[i + 1] - t[i] for i in range(4)]
            print(f"nccl={int(nccl)} shrink={int(shrink)}: {'; '.join(head)}")
            print(f"  rcs {rcs}; lock {d[0]:.3f} s, checkpoint {d[1]:.3f} s (host RSS +{r1 - r0:.0f} MiB), restore {d[2]:.3f} s, unlock {d[3]:.3f} s")
            print(f"  {tail} (exit {p.returncode})")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2] == "1", sys.argv[3] == "1")
    else:
        parent()
