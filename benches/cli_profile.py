#!/usr/bin/env python3
"""Where a fresh `logbook session checkpoint` process spends its CPU time,
beside the minimal one-transaction binary on the same file (BENCHMARKS.md,
"Whole-process CLI").

    cargo build --release --bin logbook --example checkpoint_once
    python3 benches/cli_profile.py target/release/logbook [--minimal PATH] [--runs 200]

Runs each command --runs times under `perf record --call-graph dwarf`
(user and kernel samples; run as root or with perf_event_paranoid ≤ 1), then
assigns every sample of the command's own process to the first phase below
whose marker frame is on its stack and prints each phase's share and its
time per process (samples × period). Time spent waiting (fsync, locks) is
not CPU time and is not sampled: `strace -c -f` counts the syscalls (both
programs make the same 5 fsyncs at synchronous=FULL).
"""
import argparse, collections, json, os, subprocess, sys, tempfile

# (phase, frame substrings that mark it), checked in this order.
PHASES = [
    ("exit: unmapping the process", ["do_exit", "exit_mmap", "__run_exit_handlers", "exit_group"]),
    ("start: exec, dynamic loader, relocations", ["_dl_start", "dl_main", "_dl_relocate", "load_elf_binary",
                                                  "begin_new_exec", "bprm_execve", "_dl_map_object",
                                                  "do_lookup_x", "show_map", "pthread_getattr_np"]),
    ("close: WAL checkpoint into the file, its fsyncs, unlinks", ["sqlite3_close", "sqlite3LeaveMutexAndCloseZombie",
                                                                   "drop_in_place<rusqlite::Connection>",
                                                                   "drop_in_place<logbook::ledger::Ledger>",
                                                                   "InnerConnection::close", "sqlite3WalClose"]),
    ("COMMIT: WAL frames and fsync", ["sqlite3BtreeCommitPhaseOne", "sqlite3PagerCommitPhaseOne", "pagerWalFrames",
                                      "vdbeCommit"]),
    ("reading the schema (parsing every CREATE)", ["sqlite3InitOne"]),
    ("argument parsing (clap)", ["clap_builder", "narrow::parse", "as clap_builder"]),
    ("open: file checks, probe, pragmas, writer lock", ["Ledger::open_with", "store::sqlite::open", "InnerConnection::open",
                                                        "pragma_update", "sqlite3_open_v2", "openDatabase"]),
    ("rendering and writing the output", ["cli::output", "cli::render", "Printer"]),
    ("the transaction's statements", ["sqlite3_step", "sqlite3_prepare", "sqlite3LockAndPrepare", "Ledger>::checkpoint",
                                      "write::<impl", "insert_event", "session_update"]),
    ("page faults elsewhere", ["asm_exc_page_fault", "exc_page_fault"]),
]


def attribute(perf_data, comm):
    out = subprocess.run(["perf", "script", "-i", perf_data, "--comm", comm, "-F", "comm,period,ip,sym"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    counts = collections.Counter()
    total = 0
    stack, period = [], 0

    def flush():
        nonlocal total
        if not stack:
            return
        total += period
        for name, marks in PHASES:
            if any(m in f for f in stack for m in marks):
                counts[name] += period
                return
        counts["other (mostly malloc and free, their callers not unwound)"] += period

    for line in out.splitlines():
        if not line.strip():
            flush()
            stack = []
        elif line[0] not in " \t":
            parts = line.split()
            period = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 1
        else:
            p = line.split(None, 1)
            if len(p) == 2:
                stack.append(p[1])
    flush()
    return counts, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logbook")
    ap.add_argument("--minimal", default="target/release/examples/checkpoint_once")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--sync", choices=["full", "normal"], default="full")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "cli.db")
        sid = json.loads(subprocess.check_output(
            [a.logbook, "--db", db, "session", "create", "--title", "p", "--app", "a", "--json"]))["data"]["session_id"]
        env = dict(os.environ, LOGBOOK_SYNC=a.sync)
        cmds = {
            "logbook": [a.logbook, "--db", db, "session", "checkpoint", sid, "--step", "s", "--note", "n"],
            "minimal": [a.minimal, db, sid, a.sync],
        }
        results = {}
        for name, cmd in cmds.items():
            data = os.path.join(d, name + ".perf")
            loop = " ".join(f"'{c}'" for c in cmd)
            subprocess.run(["perf", "record", "-q", "-F", "20000", "--call-graph", "dwarf,16384", "-o", data,
                            "--", "sh", "-c", f"for i in $(seq {a.runs}); do {loop} >/dev/null; done"],
                           check=True, env=env, stderr=subprocess.DEVNULL)
            results[name] = attribute(data, os.path.basename(cmd[0])[:15])
        names = [n for n, _ in PHASES] + ["other (mostly malloc and free, their callers not unwound)"]
        print(f"| phase | {' | '.join(f'{k} µs per process' for k in results)} |")
        print("|---|" + "---|" * len(results))
        for n in names:
            cells = [f"{c[n] / 1e3 / a.runs:.0f} ({c[n] / t:.0%})" if t else "-" for c, t in results.values()]
            print(f"| {n} | {' | '.join(cells)} |")
        cells = [f"{t / 1e3 / a.runs:.0f}" for _, t in results.values()]
        print(f"| all CPU | {' | '.join(cells)} |")


main()
