#!/usr/bin/env python3
"""N writer processes against one, driven by hand (BENCHMARKS.md, "32 writer
processes"): the report bench's own writer mode, optionally pinned to one CPU.

    cargo build --release && cargo bench --bench report --no-run
    python3 benches/writer_procs.py                 # 1, 2, 4, 8, 32 writers
    python3 benches/writer_procs.py --pin 0         # each process under taskset -c 0

Each round runs one writer alone, then N writers (16,000 checkpoints in all
either way, each process on its own session, synchronous=NORMAL), and prints
aggregate ops/s and the ratio to the single writer of the same round.
"""
import argparse, glob, json, os, statistics, subprocess, sys, tempfile, time

def report_binary():
    bins = [p for p in glob.glob("target/release/deps/report-*")
            if os.access(p, os.X_OK) and not p.endswith(".d")]
    if not bins:
        sys.exit("no report bench binary: run `cargo bench --bench report --no-run` first")
    return max(bins, key=os.path.getmtime)

def run(rb, db, ids, ops, pin):
    start = int(time.time() * 1000) + 1500
    pre = ["taskset", "-c", str(pin)] if pin is not None else []
    ps = [subprocess.Popen(pre + [rb, "--writer", db, i, str(ops), str(start)],
                           stdout=subprocess.PIPE, text=True) for i in ids]
    rows = [list(map(float, p.communicate()[0].split())) for p in ps]
    s0, e1 = min(r[0] for r in rows), max(r[1] for r in rows)
    errors = sum(int(r[4]) for r in rows)
    return len(ids) * ops / ((e1 - s0) / 1e9), errors

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pin", type=int, help="run every process on this CPU")
    ap.add_argument("--procs", default="2,4,8,32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--many-only", action="store_true",
                    help="skip the single writer (for profiling the N-writer run alone)")
    a = ap.parse_args()
    rb, lb = report_binary(), "target/release/logbook"
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "w.db")
        ids = [json.loads(subprocess.check_output(
                   [lb, "--db", db, "session", "create", "--title", f"w{i}", "--json"]))
               ["data"]["session_id"] for i in range(32)]
        for n in map(int, a.procs.split(",")):
            ratios = []
            for _ in range(a.rounds):
                many, e2 = run(rb, db, ids[:n], 16000 // n, a.pin)
                if a.many_only:
                    print(f"{n:2} writers: {many:7.0f} ops/s, errors {e2}", flush=True)
                    continue
                one, e1 = run(rb, db, ids[:1], 16000, a.pin)
                ratios.append(many / one)
                print(f"{n:2} writers: 1 writer {one:7.0f} ops/s, {n} writers {many:7.0f} ops/s, "
                      f"ratio {many / one:.2f}, errors {e1 + e2}", flush=True)
            if ratios:
                print(f"{n:2} writers: median ratio {statistics.median(ratios):.2f}\n", flush=True)

main()
