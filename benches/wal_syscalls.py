#!/usr/bin/env python3
"""What the file system charges for the way SQLite writes a WAL commit.

Run: python3 benches/wal_syscalls.py [DIR]   (DIR defaults to the system temp dir;
use a folder on the file system the database lives on).

Two ratios, each measured in one run with trials interleaved (BENCHMARKS.md,
"Where a checkpoint's time goes"):

1. SQLite writes every WAL frame with two write() calls (the 24-byte frame
   header, then the page). A logbook checkpoint commits about 5.4 frames, so
   about 11 calls. The same bytes written by one pwritev() call: the ratio is
   what coalescing the calls would save.
2. fsync() after writing 5 frames, into a file that grows (a new or
   truncated WAL) against one that is overwritten in place (a WAL that
   restarted after a checkpoint).
"""
import os
import statistics
import sys
import tempfile
import time

FRAME = 24 + 4096
FRAMES = 5


def split_vs_vector(path, commits=20000, trials=5):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    ring = 1000
    os.pwrite(fd, b"\0" * (FRAME * FRAMES * ring), 0)
    hdr, page = b"h" * 24, b"p" * 4096
    out = {"split": [], "vector": []}
    for _ in range(trials):
        for mode in ("split", "vector"):
            t = time.perf_counter()
            for i in range(commits):
                off = (i % ring) * FRAME * FRAMES
                if mode == "split":
                    for k in range(FRAMES):
                        os.pwrite(fd, hdr, off + k * FRAME)
                        os.pwrite(fd, page, off + k * FRAME + 24)
                else:
                    os.pwritev(fd, [hdr, page] * FRAMES, off)
            out[mode].append((time.perf_counter() - t) / commits * 1e6)
    os.close(fd)
    os.remove(path)
    return {k: statistics.median(v) for k, v in out.items()}


def fsync_grow_vs_overwrite(path, commits=1000, trials=3):
    buf = b"x" * (FRAME * FRAMES)
    out = {"grow": [], "overwrite": []}
    for _ in range(trials):
        for mode in ("grow", "overwrite"):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            if mode == "overwrite":
                os.pwrite(fd, b"\0" * (len(buf) * commits), 0)
                os.fsync(fd)
            t = time.perf_counter()
            for i in range(commits):
                os.pwrite(fd, buf, i * len(buf))
                os.fsync(fd)
            out[mode].append((time.perf_counter() - t) / commits * 1e6)
            os.close(fd)
    os.remove(path)
    return {k: statistics.median(v) for k, v in out.items()}


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else tempfile.gettempdir()
    path = os.path.join(folder, "logbook-wal-syscalls.bin")
    w = split_vs_vector(path)
    print("| commit of 5 frames | µs per commit | ratio |\n|---|---|---|")
    print(f"| 10 write calls (SQLite's pattern) | {w['split']:.1f} | 1.00 |")
    print(f"| 1 pwritev call, same bytes | {w['vector']:.1f} | {w['vector'] / w['split']:.2f} |")
    f = fsync_grow_vs_overwrite(path)
    print("\n| 5 frames + fsync | µs per commit | ratio |\n|---|---|---|")
    print(f"| overwriting a WAL in place | {f['overwrite']:.0f} | 1.00 |")
    print(f"| growing the WAL file | {f['grow']:.0f} | {f['grow'] / f['overwrite']:.2f} |")


if __name__ == "__main__":
    main()
