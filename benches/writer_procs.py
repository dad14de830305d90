#!/usr/bin/env python3
"""N writer processes against one, driven by hand (BENCHMARKS.md, "32 writer
processes"): the report bench's own writer mode, optionally pinned to one CPU.

    cargo build --release && cargo bench --bench report --no-run
    python3 benches/writer_procs.py                 # 1, 2, 4, 8, 32 writers
    python3 benches/writer_procs.py --pin 0         # each process under taskset -c 0
    python3 benches/writer_procs.py --procs 128 --ops 1000 --many-only   # worst wait under load
    python3 benches/writer_procs.py --procs 2 --ops 2000 --many-only --wrap 'strace -c -o /tmp/st.{i}'
    python3 benches/writer_procs.py --procs 32 --rounds 6 --compare old=/tmp/report-old,new=/tmp/report-new

--compare takes report bench binaries built from different commits (copy each
`target/release/deps/report-*` after `cargo bench --bench report --no-run`) and
runs them interleaved in every round (in alternating order), each one alone and as
N writers; it prints
each round and, per binary, the mean N-writer rate against the mean single-writer
rate of all binaries (the single writer runs the same source in each: it never
waits, so it never keeps the lock) and against its own mean single-writer rate
(builds of the same source can differ by 10% in code layout), as well as the
median of the per-round ratios.

Each round runs N writers, then one writer alone (16,000 checkpoints in all
either way, N × --ops with --ops; each process on its own session,
synchronous=NORMAL), and prints
aggregate ops/s and the ratio to the single writer of the same round.
"""
import argparse, glob, json, os, statistics, subprocess, sys, tempfile, time

def report_binary():
    bins = [p for p in glob.glob("target/release/deps/report-*")
            if os.access(p, os.X_OK) and not p.endswith(".d")]
    if not bins:
        sys.exit("no report bench binary: run `cargo bench --bench report --no-run` first")
    return max(bins, key=os.path.getmtime)

def run(rb, db, ids, ops, pin, wrap=None):
    start = int(time.time() * 1000) + 1500
    pre = ["taskset", "-c", str(pin)] if pin is not None else []
    def prefix(n):
        return [w.replace("{i}", str(n)) for w in wrap.split()] if wrap else []
    ps = [subprocess.Popen(pre + prefix(n) + [rb, "--writer", db, i, str(ops), str(start)],
                           stdout=subprocess.PIPE, text=True) for n, i in enumerate(ids)]
    rows = [list(map(float, p.communicate()[0].split()[:5])) for p in ps]
    s0, e1 = min(r[0] for r in rows), max(r[1] for r in rows)
    errors = sum(int(r[4]) for r in rows)
    # Each row: start_ns end_ns p99_us max_us errors (the report's writer mode).
    p99 = statistics.median(r[2] for r in rows)
    worst = max(r[3] for r in rows)
    return len(ids) * ops / ((e1 - s0) / 1e9), errors, p99, worst

def compare(bins, db, ids, procs, a):
    for n in procs:
        ops = a.ops or 16000 // n
        ones, many = {k: [] for k in bins}, {k: [] for k in bins}
        for r in range(a.rounds):
            cells = []
            # Alternate the order: a run right after an N-writer run starts
            # with a bigger WAL, which favours whoever goes first.
            order = list(bins.items()) if r % 2 == 0 else list(bins.items())[::-1]
            for k, path in order:
                one, e1, _, _ = run(path, db, ids[:1], n * ops, a.pin)
                m, e2, p99, worst = run(path, db, ids[:n], ops, a.pin)
                ones[k].append(one)
                many[k].append(m)
                cells.append(f"{k}: 1 writer {one:6.0f}, {n} writers {m:6.0f} ({m / one:.2f}), "
                             f"worst wait {worst / 1000:.0f} ms, errors {e1 + e2}")
            print(" | ".join(cells), flush=True)
        pooled = statistics.mean(x for k in bins for x in ones[k])
        for k in bins:
            ratios = [m / o for m, o in zip(many[k], ones[k])]
            own = statistics.mean(ones[k])
            print(f"{k}: {n} writers mean {statistics.mean(many[k]):.0f} ops/s, "
                  f"{statistics.mean(many[k]) / pooled:.3f} of the pooled single-writer mean "
                  f"({pooled:.0f}), {statistics.mean(many[k]) / own:.3f} of its own "
                  f"({own:.0f}); median per-round ratio {statistics.median(ratios):.3f}",
                  flush=True)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pin", type=int, help="run every process on this CPU")
    ap.add_argument("--procs", default="2,4,8,32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--many-only", action="store_true",
                    help="skip the single writer (for profiling the N-writer run alone)")
    ap.add_argument("--ops", type=int,
                    help="checkpoints per process (default: 16000 / N, so every run does 16,000)")
    ap.add_argument("--compare",
                    help="name=PATH,… of report bench binaries to run interleaved")
    ap.add_argument("--wrap",
                    help="command put in front of each writer process, {i} = its index, "
                         "e.g. 'strace -c -o /tmp/st.{i}'")
    a = ap.parse_args()
    rb, lb = report_binary(), "target/release/logbook"
    bins = dict(b.split("=", 1) for b in a.compare.split(",")) if a.compare else None
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "w.db")
        procs = list(map(int, a.procs.split(",")))
        ids = [json.loads(subprocess.check_output(
                   [lb, "--db", db, "session", "create", "--title", f"w{i}", "--json"]))
               ["data"]["session_id"] for i in range(max(procs + [32]))]
        if bins:
            compare(bins, db, ids, procs, a)
            return
        for n in procs:
            ratios = []
            ops = a.ops or 16000 // n
            for _ in range(a.rounds):
                many, e2, p99, worst = run(rb, db, ids[:n], ops, a.pin, a.wrap)
                if a.many_only:
                    print(f"{n:2} writers x {ops}: {many:7.0f} ops/s, median per-process p99 "
                          f"{p99 / 1000:.1f} ms, worst single wait {worst / 1000:.0f} ms, "
                          f"errors {e2}", flush=True)
                    continue
                one, e1, _, _ = run(rb, db, ids[:1], n * ops, a.pin, a.wrap)
                ratios.append(many / one)
                print(f"{n:2} writers: 1 writer {one:7.0f} ops/s, {n} writers {many:7.0f} ops/s, "
                      f"ratio {many / one:.2f}, errors {e1 + e2}", flush=True)
            if ratios:
                print(f"{n:2} writers: median ratio {statistics.median(ratios):.2f}\n", flush=True)

main()
