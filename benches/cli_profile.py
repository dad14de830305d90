#!/usr/bin/env python3
"""Where a fresh `logbook session checkpoint` process spends its work, beside
the minimal one-transaction binary on the same file (BENCHMARKS.md,
"Whole-process CLI").

    cargo build --release --bin logbook --example checkpoint_once
    python3 benches/cli_profile.py target/release/logbook [OTHER_LOGBOOK ...] \
        [--minimal target/release/examples/checkpoint_once]

Runs each command once under `valgrind --tool=callgrind` (instruction counts
are the same from run to run, unlike times on a shared machine) and splits
them into phases by the inclusive cost of the functions that mark each phase;
then counts each command's page faults (`perf stat -e page-faults`, 20 runs)
and system calls (`strace -c -f`). Waiting (fsync) is not an instruction:
both programs make the same fsyncs, which the syscall line shows.
"""
import argparse, json, os, re, subprocess, tempfile


def inclusive(out_file):
    """Function name (without its object) -> inclusive instructions."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out_file],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    cost, total = {}, 0
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)$", line)
        if not m:
            continue
        n = int(m.group(1).replace(",", ""))
        name = m.group(2)
        if name.startswith("PROGRAM TOTALS"):
            total = n
            continue
        name = re.sub(r" \[[^\]]*\]$", "", name).split(":", 1)[-1]
        cost[name] = max(cost.get(name, 0), n)
    return cost, total


def get(cost, key):
    return max((n for name, n in cost.items() if name == key or name.endswith(key)), default=0)


def phases_logbook(cost, total):
    main = get(cost, "logbook::cli::main")
    run = get(cost, "logbook::cli::session::run")
    opened = get(cost, "logbook::cli::open")
    schema = get(cost, "sqlite3InitOne")
    tx = get(cost, "<impl logbook::ledger::Ledger>::checkpoint")
    close = get(cost, "core::ptr::drop_in_place<logbook::ledger::Ledger>")
    return {
        "start and exit (loader, relocations, runtime)": total - main,
        "argument parsing (clap)": main - run,
        "reading the schema (every CREATE parsed)": schema,
        "open: the rest (file checks, probe, pragmas)": opened - schema,
        "the transaction (BEGIN … COMMIT, read-back)": tx,
        "close (statements finalized, WAL checkpointed)": close,
        "rendering the output": run - opened - tx - close,
    }


def phases_minimal(cost, total):
    main = get(cost, "checkpoint_once::main")
    opened = get(cost, "checkpoint_once::open")
    schema = get(cost, "sqlite3InitOne")
    tx = get(cost, "checkpoint_once::transaction")
    close = get(cost, "checkpoint_once::close")
    return {
        "start and exit (loader, relocations, runtime)": total - main,
        "argument parsing (clap)": 0,
        "reading the schema (every CREATE parsed)": schema,
        "open: the rest (file checks, probe, pragmas)": opened - schema,
        "the transaction (BEGIN … COMMIT, read-back)": tx,
        "close (statements finalized, WAL checkpointed)": close,
        "rendering the output": main - opened - tx - close,
    }


def faults(cmd):
    out = subprocess.run(["perf", "stat", "-x,", "-r", "20", "-e", "page-faults"] + cmd,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True).stderr
    return out.strip().splitlines()[-1].split(",")[0]


def syscalls(cmd):
    out = subprocess.run(["strace", "-c", "-f", "-o", "/dev/stdout"] + cmd,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    calls = {}
    for line in out.splitlines():
        p = line.split()
        if len(p) >= 5 and p[-1].isidentifier() and p[3].isdigit():
            calls[p[-1]] = int(p[3])
        elif len(p) >= 4 and p[-1] == "total":
            calls["total"] = int(p[2])
    return f"{calls.get('total', '?')} ({calls.get('fsync', 0)} fsync, {calls.get('openat', 0)} openat)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logbooks", nargs="+")
    ap.add_argument("--minimal", default="target/release/examples/checkpoint_once")
    ap.add_argument("--sync", choices=["full", "normal"], default="full")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "cli.db")
        sid = json.loads(subprocess.check_output(
            [a.logbooks[0], "--db", db, "session", "create", "--title", "p", "--app", "a", "--json"]))["data"]["session_id"]
        os.environ["LOGBOOK_SYNC"] = a.sync
        cmds = {b: ([b, "--db", db, "session", "checkpoint", sid, "--step", "s", "--note", "n"], phases_logbook)
                for b in a.logbooks}
        cmds["minimal"] = ([a.minimal, db, sid, a.sync], phases_minimal)
        cols = {}
        for name, (cmd, split) in cmds.items():
            out = os.path.join(d, "cg.out")
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + cmd,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            cost, total = inclusive(out)
            ph = split(cost, total)
            ph["all instructions"] = total
            ph["page faults"] = faults(cmd)
            ph["system calls"] = syscalls(cmd)
            cols[name] = ph
        names = list(next(iter(cols.values())).keys())
        print("| phase | " + " | ".join(cols) + " |")
        print("|---|" + "---|" * len(cols))
        for n in names:
            cells = [f"{c[n] / 1e6:.2f} M" if isinstance(c[n], int) else c[n] for c in cols.values()]
            print(f"| {n} | " + " | ".join(cells) + " |")


main()
