#!/usr/bin/env python3
"""Runs report bench binaries of different builds interleaved and compares
their single-writer throughput and 32-writer sections (BENCHMARKS.md, "A
simpler writer queue"):

    cargo bench --bench report --no-run
    cp $(ls -t target/release/deps/report-* | grep -v '\\.d$' | head -1) /tmp/report-new
    python3 benches/compare_report.py --rounds 4 old=/tmp/report-old new=/tmp/report-new

Each round runs `LOGBOOK_BENCH_ONLY=normal,full,writers BINARY` once per
binary, rotating the order from round to round, and prints each run's
figures; at the end, per binary, the medians over the rounds, and for each
binary after the first the median of its per-round ratios to the first
(ops/s against ops/s of the same round). `--only` picks other sections.
"""
import argparse, os, re, statistics, subprocess, time

ROW = re.compile(r"^\| (.+?) \| ([0-9.]+) \| ([0-9.]+) \|$")


def parse(out):
    """The figures of one report: {name: value}."""
    fig, section = {}, None
    for line in out.splitlines():
        if line.startswith("## "):
            section = ("normal" if "NORMAL" in line and "Checkpoint" in line else
                       "full" if "FULL" in line and "Checkpoint" in line else
                       "writers" if "writer processes" in line else None)
            continue
        m = ROW.match(line)
        if m and section in ("normal", "full"):
            key = "naive" if m.group(1).startswith("naive") else "logbook"
            fig[f"{section} {key} ops/s"] = float(m.group(2))
            if key == "logbook":
                fig[f"{section} vs naive"] = float(m.group(3))
        elif m and section == "writers":
            key = "1 writer ops/s" if m.group(1).startswith("1 writer") else "32 writers ops/s"
            fig[key] = float(m.group(2))
            if key.startswith("32"):
                fig["32 vs 1"] = float(m.group(3))
        w = re.search(r"median per-process p99 ([0-9.]+) µs; worst single wait ([0-9.]+) ms; "
                      r"errors escaping: ([0-9]+)", line)
        if w:
            fig["p99 ms"] = float(w.group(1)) / 1000
            fig["worst wait ms"] = float(w.group(2))
            fig["errors"] = float(w.group(3))
    return fig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--only", default="normal,full,writers")
    ap.add_argument("bins", nargs="+", help="name=PATH of report bench binaries")
    a = ap.parse_args()
    bins = dict(b.split("=", 1) for b in a.bins)
    names = list(bins)
    runs = {k: [] for k in names}
    for r in range(a.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for k in order:
            load = os.getloadavg()[0]
            t = time.time()
            out = subprocess.run([bins[k]], env={**os.environ, "LOGBOOK_BENCH_ONLY": a.only},
                                 capture_output=True, text=True, check=True).stdout
            fig = parse(out)
            runs[k].append(fig)
            cells = ", ".join(f"{n} {v:.2f}" if v < 100 else f"{n} {v:.0f}" for n, v in fig.items())
            print(f"round {r + 1} {k} ({time.time() - t:.0f} s, load {load:.1f}): {cells}",
                  flush=True)
    print()
    for k in names:
        med = {n: statistics.median(f[n] for f in runs[k]) for n in runs[k][0]}
        print(f"{k} medians: " + ", ".join(
            f"{n} {v:.2f}" if v < 100 else f"{n} {v:.0f}" for n, v in med.items()))
    base = names[0]
    for k in names[1:]:
        rel = {n: statistics.median(f[n] / b[n] for f, b in zip(runs[k], runs[base]) if b[n])
               for n in runs[k][0] if n != "errors"}
        print(f"{k} / {base}, median of per-round ratios: " + ", ".join(
            f"{n} {v:.3f}" for n, v in rel.items()))


main()
