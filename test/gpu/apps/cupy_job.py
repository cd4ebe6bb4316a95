"""A deterministic CuPy job for the GPU tests: arrays in CuPy's memory pool
(cudaMalloc underneath), an iterative computation whose every step's result
is reported exactly. Speaks the same protocol as torch_train.py:
  ready; train N -> trained (losses: one exact float64 hex per step); quit -> bye"""
import json
import os
import sys

import cupy as cp

n = int(os.environ.get("CUPY_N", str(1 << 24)))
rs = cp.random.RandomState(7)
x = rs.standard_normal(n, dtype=cp.float64)
w = rs.standard_normal((512, 512), dtype=cp.float64)
kernel = cp.ElementwiseKernel("float64 x, float64 a", "float64 y", "y = x * a + sin(x) * 0.5", "gpuckpt_step")


def step():
    global x, w
    x = kernel(x, 0.999)
    w = (w @ w) / cp.linalg.norm(w)
    return float(x.sum() + w.sum())


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


say({"event": "ready", "pid": os.getpid(), "buffers": []})
for line in sys.stdin:
    cmd = line.split()
    if not cmd:
        continue
    if cmd[0] == "train":
        say({"event": "trained", "losses": [step().hex() for _ in range(int(cmd[1]))]})
    elif cmd[0] == "quit":
        say({"event": "bye"})
        break
    else:
        say({"event": "error", "reason": "unknown command"})
