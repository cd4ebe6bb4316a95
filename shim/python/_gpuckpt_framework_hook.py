"""Tells gpuckpt's shim, inside a pause, which memory PyTorch's caching
allocator holds but no tensor uses, so that images leave it out.

A daemon thread waits in the shim (gpuckpt_framework_wait, ctypes releases
the GIL meanwhile); asked, it reads torch.cuda.memory_snapshot() and reports
the inactive blocks of the default pools (CUDA graphs' private pools are
kept whole: a replay reuses their free blocks). The shim lets this thread
through the closed gate while it answers. Whatever goes wrong is reported as
a failure, and the image then takes the whole pool."""
import ctypes
import os
import sys
import threading

NO_HOOK, RANGES, IDLE, FAILED = 0, 1, 2, 3
# Free blocks are left out in whole 64 KiB pieces: smaller ones are copied.
GRAIN = 64 << 10


def _free_ranges():
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "cuda") or not torch.cuda.is_initialized():
        return IDLE, "", []
    pairs = []
    for seg in torch.cuda.memory_snapshot():
        if tuple(seg.get("segment_pool_id") or (0, 0)) != (0, 0):
            continue
        for block in seg["blocks"]:
            if block["state"] != "inactive":
                continue
            start = -(-block["address"] // GRAIN) * GRAIN
            end = (block["address"] + block["size"]) // GRAIN * GRAIN
            if end > start:
                pairs += (start, end - start)
    return RANGES, "PyTorch", pairs


def _serve(lib):
    while True:
        rid = lib.gpuckpt_framework_wait()
        try:
            state, name, pairs = _free_ranges()
            why = ""
        except BaseException as e:  # noqa: BLE001 (any failure means: take the whole pool)
            state, name, pairs = FAILED, "PyTorch", []
            why = f"reading its allocator raised {type(e).__name__}: {e}"
        try:
            lib.gpuckpt_framework_report(rid, state, name.encode(), why.encode()[:200], (ctypes.c_uint64 * len(pairs))(*pairs), len(pairs) // 2)
        except BaseException as e:  # noqa: BLE001 (the thread must live on for the next pause)
            lib.gpuckpt_framework_report(rid, FAILED, b"PyTorch", f"its report failed: {type(e).__name__}".encode(), None, 0)


def start():
    if os.environ.get("GPUCKPT_FRAMEWORK_HOOK", "1") == "0":
        return
    try:
        lib = ctypes.CDLL(None)
        wait, report = lib.gpuckpt_framework_wait, lib.gpuckpt_framework_report
    except (OSError, AttributeError):
        return  # not under the shim
    wait.restype, wait.argtypes = ctypes.c_uint64, []
    report.restype = ctypes.c_int
    report.argtypes = [ctypes.c_uint64, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint32]
    threading.Thread(target=_serve, args=(lib,), name="gpuckpt-framework-hook", daemon=True).start()


# A forked child (a DataLoader worker) has no hook thread: it gets its own.
os.register_at_fork(after_in_child=start)
