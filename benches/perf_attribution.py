#!/usr/bin/env python3
"""Splits a `perf record --call-graph dwarf` profile of library checkpoints into
the parts BENCHMARKS.md reports ("Where a checkpoint's time goes").

    cargo build --release --example checkpoint_loop
    LOGBOOK_LOOP_PAUSE_MS=2000 perf record -D 2500 --call-graph dwarf,16384 -F 2000 \
        -o /tmp/ckpt.perf -- target/release/examples/checkpoint_loop /tmp/ckpt.db 20000 10000 normal
    perf script -i /tmp/ckpt.perf | python3 benches/perf_attribution.py

(`-D 2500` starts sampling after the sessions are created: the example pauses
2 s between setup and the loop. Check that setup took under 2.5 s, or raise both.)

Each sample is assigned to the first part whose marker frame is on its stack,
in the order of PARTS; a sample with none of them falls in "other".
"""
import collections
import sys

# (part, frame-name substrings that mark it), checked in this order.
PARTS = [
    ("writing the commit's WAL frames (`pagerWalFrames`)", ["pagerWalFrames"]),
    ("the autocheckpoint inside `COMMIT` (copy and sync)", ["walCheckpoint"]),
    ("SQLite's file and shared-memory locks (`fcntl`)", ["unixShmLock", "unixLock", "unixUnlock"]),
    ("reading pages that are not in the page cache", ["readDbPage"]),
    ("the event `INSERT` and its trigger", ["store::sqlite::sql::events::insert_event"]),
    ("reading the session back to return it", ["store::sqlite::sql::sessions::find_session", "complete_session", "fill_refs"]),
    ("redaction", ["redact::"]),
    ("the writer lock (`flock`)", ["writelock::"]),
    ("the conditional `UPDATE` and the other statements", ["sqlite3_step"]),
]


def main():
    counts = collections.Counter()
    total = 0
    stack = []

    def flush():
        nonlocal total
        if not stack:
            return
        total += 1
        for part, marks in PARTS:
            if any(m in f for f in stack for m in marks):
                counts[part] += 1
                return
        counts["other (Rust code: validation, JSON, hashing)"] += 1

    for line in sys.stdin:
        line = line.rstrip("\n")
        if not line.strip():
            flush()
            stack = []
        elif line[0] in " \t":
            parts = line.split(None, 1)
            if len(parts) == 2:
                stack.append(parts[1])
    flush()
    if total == 0:
        sys.exit("no samples on stdin (pipe `perf script` output in)")
    print(f"| part | share of time |\n|---|---|")
    for part, n in counts.most_common():
        print(f"| {part} | {100 * n / total:.1f}% |")
    print(f"\n{total} samples")


if __name__ == "__main__":
    main()
