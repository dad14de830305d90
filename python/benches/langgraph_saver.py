#!/usr/bin/env python3
"""The Python package against LangGraph's own SQLite saver (BENCHMARKS.md,
"Python package"). Run from the repository's root with a venv that has the
release wheel and python/benches/requirements.txt:

    python3 -m venv /tmp/lb-bench
    /tmp/lb-bench/bin/pip install ./python -r python/benches/requirements.txt
    /tmp/lb-bench/bin/python python/benches/langgraph_saver.py            # every section
    /tmp/lb-bench/bin/python python/benches/langgraph_saver.py --only put,procs
    bash .ci/pg /tmp/lb-bench/bin/python python/benches/langgraph_saver.py --only pg

Sections (each prints a Markdown table; every ratio is the other saver's time
over logbook's, so above 1 means logbook is faster, measured in the same run
with the two interleaved, the median of the per-round ratios):

  put      LogbookSaver.put vs SqliteSaver.put: one put on each of --threads
           new threads, and --one-ops puts on one thread, in --rounds blocks.
  read     one thread of --checkpoints checkpoints (each with one put_writes
           call): get_tuple of the newest, list with limit 10 and with no
           limit, and a fresh saver's first get_tuple (which reads the
           thread's whole history once).
  procs    --procs OS processes, each putting on its own thread of one file
           for --seconds: puts/s in all, and the errors each saver raised
           ("database is locked" counted apart).
  binding  the binding's own cost: show_session and session_events of a small
           session from Python vs the same library calls from Rust
           (`cargo bench --bench py_binding`), on the same database.
  pg       LogbookSaver.put vs PostgresSaver.put on the server of
           LOGBOOK_TEST_PG (`bash .ci/pg ...`); needs
           langgraph-checkpoint-postgres and psycopg (requirements.txt).

Both savers run at the same `synchronous` level: --sync full (default:
logbook's default, and Python's sqlite3 default) or normal. SqliteSaver gets
`PRAGMA synchronous` set on its connection; logbook gets LOGBOOK_SYNC.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def logbook_saver(path: str, sync: str):
    os.environ["LOGBOOK_SYNC"] = sync
    from logbook_ledger.langgraph import LogbookSaver

    return LogbookSaver(path)


def sqlite_saver(path: str, sync: str):
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute(f"PRAGMA synchronous={sync}")
    got = conn.execute("PRAGMA synchronous").fetchone()[0]
    assert got == {"off": 0, "normal": 1, "full": 2}[sync], got
    return saver


def close(saver) -> None:
    if hasattr(saver, "ledger"):
        saver.ledger.close()
    else:
        saver.conn.close()


def checkpoint(i: int) -> dict:
    """A small checkpoint: two short messages and a counter."""
    c = empty_checkpoint()
    c["channel_values"] = {"messages": ["hello", f"step {i}"], "step": i}
    c["channel_versions"] = {"messages": f"{i:032}.0", "step": f"{i:032}.0"}
    return c


def med(xs):
    return statistics.median(xs)


def table(head, rows):
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    print(flush=True)


# -- put ---------------------------------------------------------------------


def put_new_threads(saver, tag: str, n: int) -> float:
    cks = [checkpoint(i) for i in range(n)]
    t = time.perf_counter()
    for i, c in enumerate(cks):
        cfg = {"configurable": {"thread_id": f"{tag}-{i}", "checkpoint_ns": ""}}
        saver.put(cfg, c, {"source": "loop", "step": i}, {})
    return (time.perf_counter() - t) / n * 1e6


def put_one_thread(saver, tag: str, n: int) -> float:
    cks = [checkpoint(i) for i in range(n)]
    cfg = {"configurable": {"thread_id": tag, "checkpoint_ns": ""}}
    cfg = saver.put(cfg, checkpoint(-1), {"source": "input", "step": -1}, {})
    t = time.perf_counter()
    for i, c in enumerate(cks):
        cfg = saver.put(cfg, c, {"source": "loop", "step": i}, {})
    return (time.perf_counter() - t) / n * 1e6


def interleave(rounds, fn_lb, fn_sq):
    """Runs fn(round) for both, alternating which goes first; µs per op."""
    lb, sq = [], []
    for r in range(rounds):
        order = [(lb, fn_lb), (sq, fn_sq)]
        if r % 2:
            order.reverse()
        for out, fn in order:
            out.append(fn(r))
    return lb, sq


def raw_calls(saver, tag: str, n: int, new_threads: bool) -> float:
    """What LogbookSaver.put sends, as bare Ledger calls: the same state
    and step (and for a new thread, the same create_session); µs per put."""
    from logbook_ledger.langgraph import _STEP, _hex, _ns_key, _thread_tag

    led, serde = saver.ledger, saver.serde
    cks = [checkpoint(i) for i in range(n)]

    def create(t):
        return led.create_session("LangGraph thread", app="langgraph", tag=[_thread_tag(t)],
                                  metadata={"langgraph": {"thread_id_hex": _hex(t)}})["session_id"]

    sid = None if new_threads else create(tag)
    t0 = time.perf_counter()
    for i, c in enumerate(cks):
        cp_type, cp_bytes = serde.dumps_typed(c)
        md_type, md_bytes = serde.dumps_typed({"source": "loop", "step": i})
        state = {"v": 2, "checkpoint_ns": "", "checkpoint_id": c["id"],
                 "parent_checkpoint_id": None,
                 "checkpoint": {"type": cp_type, "bytes": len(cp_bytes)},
                 "metadata": {"type": md_type, "bytes": len(md_bytes)}}
        s = create(f"{tag}-{i}") if new_threads else sid
        led.checkpoint(s, step=f"{_STEP}{_ns_key('')} {_hex(c['id'])}", state=state,
                       payload=cp_bytes + md_bytes)
    return (time.perf_counter() - t0) / n * 1e6


def bench_put(a, d):
    lbs = logbook_saver(os.path.join(d, "put-lb.db"), a.sync)
    sqs = sqlite_saver(os.path.join(d, "put-sq.db"), a.sync)
    raw = logbook_saver(os.path.join(d, "put-raw.db"), a.sync)
    per = a.threads // a.rounds
    rows = []
    for name, fn, n, new_threads in [
        (f"put, one per new thread ({per * a.rounds:,} threads)", put_new_threads, per, True),
        (f"put, {a.one_ops:,} on one thread per round", put_one_thread, a.one_ops, False),
    ]:
        lb, sq, rw = [], [], []
        for r in range(a.rounds):
            runs = [(lb, lambda: fn(lbs, f"{fn.__name__}-{r}-{uuid.uuid4()}", n)),
                    (sq, lambda: fn(sqs, f"{fn.__name__}-{r}-{uuid.uuid4()}", n)),
                    (rw, lambda: raw_calls(raw, f"raw-{r}-{uuid.uuid4()}", n, new_threads))]
            for out, run in runs[r % 3:] + runs[:r % 3]:
                out.append(run())
        ratios = [s / x for x, s in zip(lb, sq)]
        own = [x / w for x, w in zip(lb, rw)]
        rows.append([name, f"{med(lb):.0f}", f"{med(sq):.0f}", f"{med(ratios):.2f}",
                     " ".join(f"{x:.2f}" for x in ratios), f"{med(rw):.0f}", f"{med(own):.2f}"])
    for s in (lbs, sqs, raw):
        close(s)
    print(f"### put (synchronous={a.sync.upper()} on both, {a.rounds} rounds)\n")
    table(["measure", "LogbookSaver µs/put", "SqliteSaver µs/put", "ratio (median)",
           "ratios per round", "the same Ledger calls alone µs/put",
           "LogbookSaver / Ledger calls (median)"], rows)


# -- bytes ---------------------------------------------------------------------


def bench_bytes(a, d):
    """Bytes stored per checkpoint, each side's own tables: the ledger's
    snapshot (state + payload) against SqliteSaver's `checkpoints` row
    (checkpoint + metadata), for channel values of growing size."""
    rows = []
    for size in (100, 10_000, 1_000_000, 8_000_000):
        lb_path = os.path.join(d, f"bytes-{size}-lb.db")
        sq_path = os.path.join(d, f"bytes-{size}-sq.db")
        lbs, sqs = logbook_saver(lb_path, a.sync), sqlite_saver(sq_path, a.sync)
        blob = os.urandom(size)
        for saver in (lbs, sqs):
            cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            for i in range(3):
                c = checkpoint(i)
                c["channel_values"]["blob"] = blob
                cfg = saver.put(cfg, c, {"source": "loop", "step": i}, {})
        serialized = len(lbs.serde.dumps_typed(c)[1])
        close(lbs)
        close(sqs)
        con = sqlite3.connect(lb_path)
        lb_state, lb_payload = con.execute(
            "SELECT avg(length(CAST(state AS BLOB))), avg(length(payload)) FROM session_snapshots"
        ).fetchone()
        con.close()
        con = sqlite3.connect(sq_path)
        (sq_bytes,) = con.execute(
            "SELECT avg(length(checkpoint) + length(metadata)) FROM checkpoints"
        ).fetchone()
        con.close()
        lb_bytes = lb_state + lb_payload
        rows.append([f"{size:,}", f"{serialized:,}", f"{lb_state:,.0f}", f"{lb_payload:,.0f}",
                     f"{lb_bytes:,.0f}", f"{sq_bytes:,.0f}", f"{lb_bytes - sq_bytes:+,.0f}",
                     f"{lb_bytes / sq_bytes:.3f}"])
    print("### bytes stored per checkpoint\n")
    table(["channel value bytes", "serialized checkpoint bytes", "logbook state",
           "logbook payload", "logbook total", "SqliteSaver checkpoint + metadata",
           "difference", "ratio"], rows)


# -- read ----------------------------------------------------------------------


def build_thread(saver, thread_id: str, n: int) -> None:
    cfg = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for i in range(n):
        cfg = saver.put(cfg, checkpoint(i), {"source": "loop", "step": i}, {})
        saver.put_writes(cfg, [("messages", f"reply {i}")], task_id=f"task-{i}")


def timed(fn, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def bench_read(a, d):
    n = a.checkpoints
    lb_path, sq_path = os.path.join(d, "read-lb.db"), os.path.join(d, "read-sq.db")
    t0 = time.perf_counter()
    # Built at synchronous=NORMAL/OFF (the files are the same either way;
    # only the reads are timed).
    b = logbook_saver(lb_path, "normal")
    build_thread(b, "reader", n)
    close(b)
    t1 = time.perf_counter()
    b = sqlite_saver(sq_path, "off")
    build_thread(b, "reader", n)
    close(b)
    t2 = time.perf_counter()
    print(f"(built {n:,} checkpoints + {n:,} put_writes: logbook {t1 - t0:.0f} s, "
          f"SqliteSaver {t2 - t1:.0f} s)\n", flush=True)
    lbs, sqs = logbook_saver(lb_path, a.sync), sqlite_saver(sq_path, a.sync)
    cfg = {"configurable": {"thread_id": "reader", "checkpoint_ns": ""}}
    # The same answers (the checkpoint ids differ: each build made its own).
    newest = sqs.get_tuple(cfg)
    got = lbs.get_tuple(cfg)
    assert got.checkpoint["channel_values"] == newest.checkpoint["channel_values"]
    assert [w[1:] for w in got.pending_writes] == [w[1:] for w in newest.pending_writes]
    assert [t.checkpoint["channel_values"] for t in lbs.list(cfg, limit=10)] == [
        t.checkpoint["channel_values"] for t in sqs.list(cfg, limit=10)]
    rows = []
    cases = [
        ("get_tuple, newest", lambda s: s.get_tuple(cfg), 300, a.rounds),
        ("list, limit 10", lambda s: list(s.list(cfg, limit=10)), 50, a.rounds),
        (f"list, no limit ({n:,} tuples)", lambda s: list(s.list(cfg)), 1, 2),
    ]
    for name, fn, calls, rounds in cases:
        lb, sq = interleave(rounds, lambda r: timed(lambda: fn(lbs), calls),
                            lambda r: timed(lambda: fn(sqs), calls))
        ratios = [s / x for x, s in zip(lb, sq)]
        rows.append([name, fmt_us(med(lb)), fmt_us(med(sq)), f"{med(ratios):.2f}",
                     " ".join(f"{x:.2f}" for x in ratios)])

    def cold(open_fn, path):
        def run(r):
            s = open_fn(path, a.sync)
            t = time.perf_counter()
            s.get_tuple(cfg)
            us = (time.perf_counter() - t) * 1e6
            close(s)
            return us
        return run

    lb, sq = interleave(3, cold(logbook_saver, lb_path), cold(sqlite_saver, sq_path))
    ratios = [s / x for x, s in zip(lb, sq)]
    rows.append(["a fresh saver's first get_tuple", fmt_us(med(lb)), fmt_us(med(sq)),
                 f"{med(ratios):.3f}", " ".join(f"{x:.3f}" for x in ratios)])
    # The floor under any saver's get_tuple: deserializing what it returns.
    tup = sqs.get_tuple(cfg)
    ty, blob = sqs.serde.dumps_typed(tup.checkpoint)
    loads = timed(lambda: sqs.serde.loads_typed((ty, blob)), 2000)
    close(lbs)
    close(sqs)
    print(f"### read: one thread of {n:,} checkpoints (synchronous={a.sync.upper()})\n")
    table(["measure", "LogbookSaver", "SqliteSaver", "ratio (median)", "ratios per round"], rows)
    print(f"serde.loads_typed of the newest checkpoint alone: {loads:.1f} µs\n", flush=True)


def fmt_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    return f"{us / 1e3:.2f} ms" if us >= 1e3 else f"{us:.0f} µs"


# -- procs ---------------------------------------------------------------------


def proc_worker(kind: str, path: str, sync: str, start: float, seconds: float) -> None:
    saver = logbook_saver(path, sync) if kind == "logbook" else sqlite_saver(path, sync)
    cfg = {"configurable": {"thread_id": f"w-{os.getpid()}-{uuid.uuid4()}", "checkpoint_ns": ""}}
    ops = locked = other = 0
    kinds: dict[str, int] = {}
    i = 0
    while time.time() < start:
        time.sleep(0.001)
    t0 = time.time()
    deadline = t0 + seconds
    while time.time() < deadline:
        try:
            cfg = saver.put(cfg, checkpoint(i), {"source": "loop", "step": i}, {})
            ops += 1
        except Exception as e:  # counted, as the Rust writer benches count them
            name = type(e).__name__
            if "database is locked" in str(e):
                locked += 1
            else:
                other += 1
            kinds[name] = kinds.get(name, 0) + 1
        i += 1
    t1 = time.time()
    close(saver)
    print(json.dumps({"start": t0, "end": t1, "ops": ops, "locked": locked, "other": other,
                      "kinds": kinds}), flush=True)


def run_procs(kind: str, path: str, a, n: int) -> dict:
    start = time.time() + 2.0
    ps = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", kind, path,
                            a.sync, str(start), str(a.seconds)], stdout=subprocess.PIPE, text=True)
          for _ in range(n)]
    rows = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in ps]
    s0, e1 = min(r["start"] for r in rows), max(r["end"] for r in rows)
    kinds: dict[str, int] = {}
    for r in rows:
        for k, v in r["kinds"].items():
            kinds[k] = kinds.get(k, 0) + v
    return {"rate": sum(r["ops"] for r in rows) / (e1 - s0),
            "locked": sum(r["locked"] for r in rows), "other": sum(r["other"] for r in rows),
            "kinds": kinds}


def bench_procs(a, d):
    rates = {k: {1: [], a.procs: []} for k in ("logbook", "sqlite")}
    ratios = []
    errs = {"logbook": [0, 0, {}], "sqlite": [0, 0, {}]}
    for r in range(a.proc_rounds):
        order = ["logbook", "sqlite"] if r % 2 == 0 else ["sqlite", "logbook"]
        line = []
        for kind in order:
            for n in (a.procs, 1):
                path = os.path.join(d, f"procs-{kind}-{r}-{n}.db")
                opener = logbook_saver if kind == "logbook" else sqlite_saver
                close(opener(path, a.sync))
                res = run_procs(kind, path, a, n)
                rates[kind][n].append(res["rate"])
                e = errs[kind]
                e[0] += res["locked"]
                e[1] += res["other"]
                for k, v in res["kinds"].items():
                    e[2][k] = e[2].get(k, 0) + v
                line.append(f"{kind} x{n} {res['rate']:.0f} puts/s ({res['locked']} locked, "
                            f"{res['other']} other)")
        ratios.append(rates["logbook"][a.procs][-1] / rates["sqlite"][a.procs][-1])
        print(f"round {r + 1}: " + "; ".join(line), flush=True)
    print(f"\n### {a.procs} processes writing one file, {a.seconds:g} s each, "
          f"synchronous={a.sync.upper()}, {a.proc_rounds} rounds\n")
    rows = []
    for kind, name in (("logbook", "LogbookSaver"), ("sqlite", "SqliteSaver")):
        many, one = med(rates[kind][a.procs]), med(rates[kind][1])
        e = errs[kind]
        rows.append([name, f"{many:.0f}", f"{one:.0f}", f"{many / one:.2f}", e[0],
                     f"{e[1]} {e[2] or ''}".strip(),
                     f"{med(ratios):.2f}" if kind == "logbook" else "1.00"])
    table(["saver", f"puts/s, {a.procs} processes (median)", "puts/s, 1 process (median)",
           f"{a.procs} / 1", "'database is locked' (all rounds)", "errors (all rounds)",
           f"ratio to SqliteSaver, {a.procs} processes (median of rounds)"], rows)


# -- binding -------------------------------------------------------------------


def bench_binding(a, d):
    import logbook_ledger as lb

    path = os.path.join(d, "binding.db")
    led = lb.Ledger(path)
    sid = led.create_session("binding floor")["session_id"]
    led.checkpoint(sid, step="one", state={"k": "v"})
    led.append_event(sid, type="x.bench")
    calls = a.binding_calls
    py_reads = {
        "show_session": lambda: led.show_session(sid),
        "session_events": lambda: led.session_events(sid, limit=1),
        "snapshot": lambda: led.snapshot(sid),
    }
    env = dict(os.environ)
    if a.target_dir:
        env["CARGO_TARGET_DIR"] = a.target_dir
    subprocess.run(["cargo", "bench", "--bench", "py_binding", "--no-run"], cwd=ROOT, env=env,
                   check=True, stderr=subprocess.DEVNULL)
    py_all = {k: [] for k in py_reads}
    rs_all = {k: [] for k in py_reads}

    def rust():
        out = subprocess.run(["cargo", "bench", "--bench", "py_binding", "--", path, sid,
                              str(calls)], cwd=ROOT, env=env, check=True, capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            name, us = line.split()
            rs_all[name].append(float(us))

    def python():
        for name, fn in py_reads.items():
            timed(fn, calls // 10)
            py_all[name].append(med([timed(fn, calls) for _ in range(5)]))

    for r in range(a.rounds):
        for f in (python, rust) if r % 2 else (rust, python):
            f()
    led.close()
    rows = []
    for name in py_reads:
        diffs = [p - q for p, q in zip(py_all[name], rs_all[name])]
        rows.append([name, f"{med(py_all[name]):.1f}", f"{med(rs_all[name]):.1f}",
                     f"{med(diffs):.1f}", " ".join(f"{x:.1f}" for x in diffs)])
    print(f"### the binding's cost per call ({a.rounds} rounds, each the median of 5 "
          f"batches of {calls:,} calls, Python and Rust alternating)\n")
    table(["read", "Python µs", "Rust µs", "difference µs (median)", "per round"], rows)


# -- lib -----------------------------------------------------------------------


def bench_lib(a, d):
    """The Rust library's checkpoint (what the saver's put sends, from a
    fresh process: `cargo bench --bench py_binding -- checkpoint …`) against
    SqliteSaver.put on one thread, each on a fresh file, alternating."""
    env = dict(os.environ)
    if a.target_dir:
        env["CARGO_TARGET_DIR"] = a.target_dir
    subprocess.run(["cargo", "bench", "--bench", "py_binding", "--no-run"], cwd=ROOT, env=env,
                   check=True, stderr=subprocess.DEVNULL)
    n = a.one_ops
    lib, sq = [], []

    def rust(r):
        path = os.path.join(d, f"lib-{r}.db")
        out = subprocess.run(["cargo", "bench", "--bench", "py_binding", "--", "checkpoint",
                              path, str(n), a.sync], cwd=ROOT, env=env, check=True,
                             capture_output=True, text=True).stdout
        lib.append(float(out.split()[1]))

    def saver(r):
        s = sqlite_saver(os.path.join(d, f"lib-sq-{r}.db"), a.sync)
        sq.append(put_one_thread(s, f"lib-{r}", n))
        close(s)

    for r in range(a.rounds):
        for f in (saver, rust) if r % 2 else (rust, saver):
            f(r)
    ratios = [q / x for x, q in zip(lib, sq)]
    print(f"### the library against SqliteSaver.put (synchronous={a.sync.upper()}, "
          f"{n:,} on one thread from a fresh process, {a.rounds} rounds)\n")
    table(["library µs/checkpoint", "SqliteSaver µs/put", "ratio (median)", "per round"],
          [[f"{med(lib):.0f}", f"{med(sq):.0f}", f"{med(ratios):.2f}",
            " ".join(f"{x:.2f}" for x in ratios)]])
    print(f"SqliteSaver's WAL frames per put: {saver_wal_frames(d, n):.2f} "
          "(the ledger's per checkpoint: BENCHMARKS.md, \"WAL pages written per operation\")\n")


def saver_wal_frames(d, n):
    """WAL frames one SqliteSaver.put appends: the WAL's growth over `n` puts
    on one thread (after 50 to warm up), automatic checkpoints off."""
    path = os.path.join(d, "lib-wal.db")
    s = sqlite_saver(path, "full")
    s.conn.execute("PRAGMA wal_autocheckpoint=0")
    page = s.conn.execute("PRAGMA page_size").fetchone()[0]
    put_one_thread(s, "warm", 50)
    s.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = os.path.getsize(path + "-wal")
    put_one_thread(s, "wal", n)
    grown = os.path.getsize(path + "-wal") - max(before, 32)
    close(s)
    return grown / (page + 24) / n


# -- pg ------------------------------------------------------------------------


def bench_pg(a, d):
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection
    from psycopg.rows import dict_row

    url = os.environ.get("LOGBOOK_TEST_PG")
    if not url:
        sys.exit("pg: LOGBOOK_TEST_PG is not set (run under `bash .ci/pg`)")
    from logbook_ledger.langgraph import LogbookSaver

    lbs = LogbookSaver(url)
    conn = Connection.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    pgs = PostgresSaver(conn)
    pgs.setup()
    per = a.pg_ops
    rows = []
    for name, fn in [(f"put, one per new thread ({per:,} per round)", put_new_threads),
                     (f"put, {per:,} on one thread per round", put_one_thread)]:
        lb, pg = interleave(a.rounds, lambda r: fn(lbs, f"pg-{r}-{uuid.uuid4()}", per),
                            lambda r: fn(pgs, f"pg-{r}-{uuid.uuid4()}", per))
        ratios = [s / x for x, s in zip(lb, pg)]
        rows.append([name, f"{med(lb):.0f}", f"{med(pg):.0f}", f"{med(ratios):.2f}",
                     " ".join(f"{x:.2f}" for x in ratios)])
    lbs.ledger.close()
    conn.close()
    print(f"### put on PostgreSQL ({a.rounds} rounds)\n")
    table(["measure", "LogbookSaver µs/put", "PostgresSaver µs/put", "ratio (median)",
           "ratios per round"], rows)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        kind, path, sync, start, seconds = sys.argv[2:7]
        proc_worker(kind, path, sync, float(start), float(seconds))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="put,read,procs,binding",
                    help="comma-separated sections: put, read, procs, binding, pg, bytes, lib")
    ap.add_argument("--sync", choices=["full", "normal"], default="full")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=10_000)
    ap.add_argument("--one-ops", type=int, default=1_000)
    ap.add_argument("--checkpoints", type=int, default=100_000)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--proc-rounds", type=int, default=3)
    ap.add_argument("--binding-calls", type=int, default=20_000)
    ap.add_argument("--pg-ops", type=int, default=1_000)
    ap.add_argument("--target-dir", help="CARGO_TARGET_DIR for the Rust half of `binding`")
    a = ap.parse_args()
    import langgraph.checkpoint.sqlite as lgs
    from importlib.metadata import version

    print(f"logbook-ledger {version('logbook-ledger')}, langgraph-checkpoint "
          f"{version('langgraph-checkpoint')}, langgraph-checkpoint-sqlite "
          f"{version('langgraph-checkpoint-sqlite')} (Python's sqlite3: SQLite "
          f"{sqlite3.sqlite_version}); {os.cpu_count()} CPUs\n", flush=True)
    del lgs
    d = tempfile.mkdtemp(prefix="lb-pybench-", dir=os.environ.get("TMPDIR", "/tmp"))
    try:
        for section in a.only.split(","):
            {"put": bench_put, "read": bench_read, "procs": bench_procs,
             "binding": bench_binding, "pg": bench_pg,
             "bytes": bench_bytes, "lib": bench_lib}[section.strip()](a, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
