"""A deterministic data-parallel training job for the GPU tests, run as users
run it: `torchrun --nproc_per_node=2 ddp_train.py` (or one rank per
`gpuckpt run`, RANK/WORLD_SIZE/MASTER_* set by hand). Each rank trains an
MLP under DistributedDataParallel with AdamW, keeps an extra device buffer
of DDP_BUFFER_GIB, all-reduces its loss every step, and appends to
$DDP_OUT/rankR.txt one line per step: the step, its loss, the all-reduced
loss (float.hex, exact) and a checksum of the buffer; then "done". Runs
compare bit for bit.

Environment: DDP_OUT (required), DDP_STEPS (default 40), DDP_STEP_SLEEP
seconds between steps (default 0), DDP_BUFFER_GIB (default 1), DDP_WIDTH
(default 4096)."""
import os
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

rank = int(os.environ["RANK"])
local = int(os.environ.get("LOCAL_RANK", rank))
steps = int(os.environ.get("DDP_STEPS", "40"))
pause = float(os.environ.get("DDP_STEP_SLEEP", "0"))
width = int(os.environ.get("DDP_WIDTH", "4096"))
gib = float(os.environ.get("DDP_BUFFER_GIB", "1"))

torch.use_deterministic_algorithms(True)
torch.cuda.set_device(local)
dist.init_process_group("nccl")
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 1024)
).cuda()
ddp = DDP(model, device_ids=[local])
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
buf = torch.full((int(gib * (1 << 28)),), float(rank + 1), device="cuda")
gen = torch.Generator(device="cuda")
gen.manual_seed(1234 + rank)

with open(os.path.join(os.environ["DDP_OUT"], f"rank{rank}.txt"), "a", buffering=1) as out:
    for s in range(steps):
        x = torch.randn(256, 1024, device="cuda", generator=gen)
        y = torch.randn(256, 1024, device="cuda", generator=gen)
        loss = F.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        buf.add_(1.0 / 1024)
        check = buf[:: 1 << 20].sum()
        out.write(f"{s} {loss.item().hex()} {total.item().hex()} {check.item().hex()}\n")
        time.sleep(pause)
    dist.barrier()
    dist.destroy_process_group()
    out.write("done\n")
