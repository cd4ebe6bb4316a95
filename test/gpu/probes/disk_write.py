#!/usr/bin/env python3
"""How fast the image disk takes a durable write, buffered against O_DIRECT.

A durable checkpoint of the PyTorch job writes 3.4 GB of pool image at
1.2-1.3 GB/s through the page cache (positional writes, sync_file_range
every 16 MiB, fdatasync at commit): issue 26's 4x needs more. This writes
GIB GiB of random bytes into one file in DIR, RUNS times per way:
  buffered  THREADS writers of 4 MiB, sync_file_range as the writer does, then fdatasync
  direct    O_DIRECT, page-aligned buffers of BLOCK MiB, QD writers at once, then fdatasync
  files     as buffered, but each writer into a file of its own (one file's
            buffered writes take its inode's lock: they queue behind each other)
and prints GB/s for each, with the file system it wrote on.
  python3 test/gpu/probes/disk_write.py [DIR] [GIB] [RUNS]
"""
import ctypes
import mmap
import os
import subprocess
import sys
import threading
import time

d = sys.argv[1] if len(sys.argv) > 1 else '/tmp'
gib = float(sys.argv[2]) if len(sys.argv) > 2 else 3
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 2
total = int(gib * (1 << 30)) // (64 << 20) * (64 << 20)
src = mmap.mmap(-1, 64 << 20)  # page-aligned, as O_DIRECT wants
src.write(os.urandom(64 << 20))
path = os.path.join(d, f'disk-probe-{os.getpid()}')
libc = ctypes.CDLL(None, use_errno=True)
libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
SYNC_FILE_RANGE_WRITE = 2

print(subprocess.run(['df', '-T', d], capture_output=True, text=True).stdout.strip().splitlines()[-1])
try:
    print(subprocess.run(['findmnt', '-no', 'SOURCE,FSTYPE,OPTIONS', '-T', d], capture_output=True, text=True).stdout.strip())
except FileNotFoundError:
    pass


def write_all(fd, block, writers, writeback):
    """Writers take blocks in turn; the data is the random source, cycled. fd: one, or one per writer."""
    fds = fd if isinstance(fd, list) else [fd] * writers
    nxt = [0]
    lock = threading.Lock()
    view = memoryview(src)

    def worker(fd):
        while True:
            with lock:
                off = nxt[0]
                nxt[0] += block
            if off >= total:
                return
            n = min(block, total - off)
            so = off % len(src)
            done = 0
            while done < n:
                w = os.pwrite(fd, view[so + done: so + n], off + done)
                done += w
            if writeback:
                libc.sync_file_range(fd, off, n, SYNC_FILE_RANGE_WRITE)

    ts = [threading.Thread(target=worker, args=(f,)) for f in fds]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def one(way, block_mib, writers):
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    if way == 'direct':
        flags |= os.O_DIRECT
    paths = [f'{path}-{i}' for i in range(writers)] if way == 'files' else [path]
    fds = [os.open(p, flags, 0o600) for p in paths]
    t0 = time.perf_counter()
    write_all(fds if way == 'files' else fds[0], block_mib << 20, writers, way != 'direct')
    t1 = time.perf_counter()
    for fd in fds:
        os.fdatasync(fd)
    t2 = time.perf_counter()
    for fd, p in zip(fds, paths):
        os.close(fd)
        os.unlink(p)
    return total / (t2 - t0) / 1e9, t1 - t0, t2 - t1


ways = [('buffered', 4, 1), ('buffered', 4, 4), ('buffered', 4, 16), ('files', 4, 2), ('files', 4, 4),
        ('files', 4, 8), ('files', 4, 16), ('direct', 4, 1), ('direct', 4, 4), ('direct', 16, 4), ('direct', 8, 8),
        ('direct', 16, 16)]
if os.environ.get('DISK_WAYS'):  # e.g. DISK_WAYS=buffered:4:16,files:4:8
    ways = [(w, int(b), int(n)) for w, b, n in (x.split(':') for x in os.environ['DISK_WAYS'].split(','))]
for r in range(runs):
    for way, block, writers in ways:
        try:
            gbs, w, s = one(way, block, writers)
            print(f'run {r + 1}: {way:8} {block:2} MiB x {writers:2} writers: {gbs:.2f} GB/s '
                  f'(writes {w:.2f} s, fdatasync {s:.2f} s, {total / 1e9:.2f} GB)', flush=True)
        except OSError as e:
            print(f'run {r + 1}: {way} {block} MiB x {writers}: {e}', flush=True)
            try:
                os.unlink(path)
            except OSError:
                pass
