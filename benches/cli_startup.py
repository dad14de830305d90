#!/usr/bin/env python3
"""Whole-process CLI commands of one or more logbook binaries against a
baseline, alternating, median (BENCHMARKS.md, "Whole-process CLI").

    python3 benches/cli_startup.py target/release/logbook [OTHER_BINARY ...]
    python3 benches/cli_startup.py --drop-caches A B   # root: drop the page cache first

    cargo build --release --example checkpoint_once
    python3 benches/cli_startup.py --checkpoint full target/release/logbook [OTHER ...]

Default: `session show ID --json` (20 events) against `sqlite3 -json` reading
the same session row and events. With --checkpoint full|normal:
`session checkpoint ID --step s --note n` against the minimal one-transaction
binary (examples/checkpoint_once.rs: the same transaction, nothing else) on
the same file at that `synchronous` level (LOGBOOK_SYNC for logbook).

Prints each command's median ms and its ratio to the baseline's in the same
run, and its page faults (`perf stat -e page-faults`, when perf is there).
"""
import argparse, json, os, statistics, subprocess, tempfile, time

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--drop-caches", action="store_true")
    ap.add_argument("--checkpoint", choices=["full", "normal"])
    ap.add_argument("--minimal", default="target/release/examples/checkpoint_once")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "cli.db")
        lb = a.binaries[0]
        sid = json.loads(subprocess.check_output(
            [lb, "--db", db, "session", "create", "--title", "cli bench", "--app", "a", "--json"]))["data"]["session_id"]
        for i in range(20):
            subprocess.run([lb, "--db", db, "session", "checkpoint", sid, "--step", f"s{i}",
                            "--note", "a note"], stdout=subprocess.DEVNULL, check=True)
        env = dict(os.environ)
        if a.checkpoint:
            env["LOGBOOK_SYNC"] = a.checkpoint
            cmds = {b: [b, "--db", db, "session", "checkpoint", sid, "--step", "s", "--note", "n"]
                    for b in a.binaries}
            base_name = "minimal"
            cmds[base_name] = [a.minimal, db, sid, a.checkpoint]
        else:
            sql = (f"SELECT * FROM sessions WHERE session_id = '{sid}'; "
                   f"SELECT * FROM events WHERE session_id = '{sid}' ORDER BY seq;")
            cmds = {b: [b, "--db", db, "session", "show", sid, "--json"] for b in a.binaries}
            base_name = "sqlite3"
            cmds[base_name] = ["sqlite3", "-json", db, sql]
        if a.drop_caches:
            subprocess.run(["sync"], check=True)
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("1\n")
        times = {k: [] for k in cmds}
        for _ in range(a.runs):
            for k, c in cmds.items():
                t = time.perf_counter()
                subprocess.run(c, stdout=subprocess.DEVNULL, check=True, env=env)
                times[k].append(time.perf_counter() - t)
        base = statistics.median(times[base_name])
        for k, c in cmds.items():
            m = statistics.median(times[k])
            faults = ""
            try:
                out = subprocess.run(["perf", "stat", "-x,", "-r", "20", "-e", "page-faults"] + c,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env=env).stderr
                faults = f", {out.strip().splitlines()[-1].split(',')[0]} page faults"
            except (OSError, IndexError):
                pass
            print(f"{k}: {m * 1e3:.2f} ms, ratio {m / base:.2f}{faults}")

main()
