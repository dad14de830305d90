#!/usr/bin/env python3
"""Summarises the per-write phase trace of benches/phase_trace.patch
(BENCHMARKS.md, "32 writer processes": where the time goes).

    git apply benches/phase_trace.patch && cargo bench --bench report --no-run
    d=$(mktemp -d); LOGBOOK_PHASE_TRACE=$d python3 benches/writer_procs.py --procs 32 --rounds 1 --many-only
    python3 benches/phase_trace.py $d
    git apply -R benches/phase_trace.patch

Each line of `t.<pid>` is one write: wall-clock ns when the writer lock was
acquired, after `BEGIN IMMEDIATE`, after the statements, after `COMMIT`, and
after the lock was released. The first and last 10% of writes (by time) are
dropped, so start-up and the tail where fewer processes remain do not count.
"""
import glob, os, statistics, sys


def main():
    d = sys.argv[1]
    ev = []
    for f in glob.glob(os.path.join(d, "t.*")):
        for line in open(f):
            ev.append(tuple(map(int, line.split())) + (f,))
    ev.sort()
    n = len(ev)
    ev = ev[n // 10 : n - n // 10]
    if len(ev) < 2:
        sys.exit("no trace lines: was the patch applied and LOGBOOK_PHASE_TRACE set?")

    def show(name, xs):
        xs = sorted(xs)
        print(f"{name:8} mean {statistics.mean(xs):6.1f} µs  median {xs[len(xs) // 2]:6.1f}"
              f"  p90 {xs[int(0.9 * len(xs))]:6.1f}  p99 {xs[int(0.99 * len(xs))]:7.1f}")

    show("begin", [(e[1] - e[0]) / 1e3 for e in ev])
    show("body", [(e[2] - e[1]) / 1e3 for e in ev])
    show("commit", [(e[3] - e[2]) / 1e3 for e in ev])
    show("release", [(e[4] - e[3]) / 1e3 for e in ev])
    gaps = [((ev[i][0] - ev[i - 1][4]) / 1e3, ev[i][5] != ev[i - 1][5]) for i in range(1, len(ev))]
    show("gap", [g for g, _ in gaps])
    slow = [(e[4] - e[3]) / 1e3 for e in ev if (e[4] - e[3]) > 5_000]
    print(f"releases over 5 µs: {len(slow) / len(ev):.0%}"
          + (f", mean {statistics.mean(slow):.1f} µs" if slow else ""))
    hand = [g for g, h in gaps if h]
    print(f"hand-overs to another process: {len(hand)} of {len(gaps)} turns"
          + (f", gap mean {statistics.mean(hand):.1f} µs" if hand else ""))
    if hand:
        show("hand-over", hand)
    # Phases by a write's place in its process's run of consecutive writes
    # (its turn): the first, the 2nd–5th, the 6th–20th, the 21st on.
    pos, k = [], 0
    for i, e in enumerate(ev):
        k = k + 1 if i > 0 and ev[i - 1][5] == e[5] else 0
        pos.append(0 if k == 0 else 1 if k < 5 else 2 if k < 20 else 3)
    for b, name in enumerate(["1st", "2nd-5th", "6th-20th", "21st on"]):
        xs = [e for e, p in zip(ev, pos) if p == b]
        if xs:
            med = lambda i: statistics.median((e[i + 1] - e[i]) / 1e3 for e in xs)
            print(f"{name:>8} of a turn: {len(xs):6} writes, medians: begin {med(0):6.1f} µs, "
                  f"body {med(1):6.1f}, commit {med(2):6.1f}, release {med(3):5.1f}")
    span = (ev[-1][4] - ev[0][0]) / 1e3
    print(f"writes {len(ev)}, {span / len(ev):.1f} µs per write end to end")


main()
