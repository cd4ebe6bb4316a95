"""CPU test application of the framework hook (shim/python/): a Python
program under `gpuckpt run`, the shim and the fake libcuda, with a stand-in
for PyTorch's caching allocator: one 8 MiB segment from cuMemAlloc whose
blocks are [0, 2 MiB) active, [2, 6 MiB) inactive, [6, 8 MiB) active.
torch.cuda.memory_snapshot() reports them as PyTorch does.

Commands on stdin, one JSON line per answer:
  state   SHA-256 of the active blocks and of the free one
  mutate  the whole segment rewritten (a training step)
  use     the free block becomes active, its bytes unchanged
  hang    memory_snapshot() blocks for 5 s (an allocator lock held)
  quit
The ready line says whether a user's own sitecustomize ran too."""
import builtins
import ctypes
import hashlib
import json
import sys
import time
import types

MiB = 1 << 20
SEGMENT = 8 * MiB
FREE = (2 * MiB, 6 * MiB)

ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
cu = ctypes.CDLL(None)  # the shim's entry points come first


def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what} returned {rc}")


check(cu.cuInit(0), "cuInit")
ctx = ctypes.c_void_p()
check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "cuDevicePrimaryCtxRetain")
check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
ptr = ctypes.c_uint64()
check(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(SEGMENT)), "cuMemAlloc_v2")
base = ptr.value
state = {"free": True, "hang": False, "step": 0}


def write_all():
    state["step"] += 1
    # Each MiB its own pattern: the blocks' digests differ.
    data = b"".join(bytes((i * 7 + state["step"] * 13 + k) & 0xFF for i in range(256)) * (MiB // 256) for k in range(SEGMENT // MiB))
    check(cu.cuMemcpyHtoD_v2(ctypes.c_uint64(base), data, ctypes.c_size_t(SEGMENT)), "cuMemcpyHtoD_v2")


def read(off, size):
    buf = ctypes.create_string_buffer(size)
    check(cu.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(base + off), ctypes.c_size_t(size)), "cuMemcpyDtoH_v2")
    return buf.raw


def memory_snapshot():
    if state["hang"]:
        time.sleep(5)
    blocks = [{"address": base, "size": FREE[0], "state": "active_allocated"}]
    blocks.append({"address": base + FREE[0], "size": FREE[1] - FREE[0], "state": "inactive" if state["free"] else "active_allocated"})
    blocks.append({"address": base + FREE[1], "size": SEGMENT - FREE[1], "state": "active_allocated"})
    return [{"device": 0, "address": base, "total_size": SEGMENT, "segment_pool_id": (0, 0), "blocks": blocks}]


torch = types.ModuleType("torch")
torch.cuda = types.SimpleNamespace(is_initialized=lambda: True, memory_snapshot=memory_snapshot)
sys.modules["torch"] = torch

write_all()
print(json.dumps({"event": "ready", "pid": __import__("os").getpid(), "addr": hex(base), "userSitecustomize": getattr(builtins, "user_sitecustomize_ran", False)}), flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "state":
        active = hashlib.sha256(read(0, FREE[0]) + read(FREE[1], SEGMENT - FREE[1])).hexdigest()
        print(json.dumps({"event": "state", "active": active, "free": hashlib.sha256(read(FREE[0], FREE[1] - FREE[0])).hexdigest()}), flush=True)
    elif cmd == "mutate":
        write_all()
        print(json.dumps({"event": "mutated", "step": state["step"]}), flush=True)
    elif cmd == "use":
        state["free"] = False
        print(json.dumps({"event": "used"}), flush=True)
    elif cmd == "hang":
        state["hang"] = True
        print(json.dumps({"event": "hanging"}), flush=True)
    elif cmd == "quit":
        print(json.dumps({"event": "bye"}), flush=True)
        break
