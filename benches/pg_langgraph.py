"""LangGraph's Postgres checkpointer beside logbook (benches/pg.rs).

Run by `cargo bench --bench pg` from a venv it creates (langgraph-checkpoint-postgres,
psycopg[binary]); not meant to be run by hand. The server URL comes from the
environment (LOGBOOK_BENCH_LG_URL), never from the command line.

  pg_langgraph.py setup            creates LangGraph's tables (once, before the trials)
  pg_langgraph.py worker SECONDS   one client process, the same protocol as
                                   `pg --writer`: connects (as
                                   PostgresSaver.from_conn_string does: autocommit,
                                   prepare_threshold=0, dict rows), puts 3 warm-up
                                   checkpoints on its own thread, prints `ready`,
                                   waits for one byte on stdin (the common start),
                                   then puts checkpoints for SECONDS and prints
                                   `START_NS END_NS OPS ERRORS` and a line of
                                   per-put latencies in µs
  pg_langgraph.py list ROWS        creates LangGraph's tables, loads ROWS checkpoints
                                   by SQL (copies of one real put's row, 1,000
                                   threads, 1,000 checkpoints each at 1,000,000),
                                   VACUUM ANALYZE, then times
                                   `list(saver.list(thread, limit=20))` (50 warm-up
                                   calls, then 1,000) and prints `P50_US P99_US ROWS`
"""

import os
import sys
import time
import uuid

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg import Connection
from psycopg.rows import dict_row


def connect():
    return Connection.connect(
        os.environ["LOGBOOK_BENCH_LG_URL"],
        autocommit=True,
        prepare_threshold=0,
        row_factory=dict_row,
    )


def put(saver, cfg, step):
    ck = empty_checkpoint()
    ck["channel_values"] = {"step": step}
    return saver.put(cfg, ck, {"source": "loop", "step": step}, {})


def worker(seconds):
    with connect() as conn:
        saver = PostgresSaver(conn)
        cfg = {"configurable": {"thread_id": str(uuid.uuid4()), "checkpoint_ns": ""}}
        for i in range(3):
            cfg = put(saver, cfg, f"warm{i}")
        print("ready", flush=True)
        sys.stdin.buffer.read(1)
        lat = []
        errors = 0
        start = time.time_ns()
        deadline = time.perf_counter() + seconds
        i = 0
        while True:
            t = time.perf_counter()
            try:
                cfg = put(saver, cfg, f"m{i}")
            except Exception as e:  # counted and reported, as the Rust writers do
                errors += 1
                if errors == 1:
                    print(f"pg_langgraph: put failed: {type(e).__name__}", file=sys.stderr)
            now = time.perf_counter()
            lat.append((now - t) * 1e6)
            i += 1
            if now >= deadline:
                break
        end = time.time_ns()
        print(f"{start} {end} {len(lat)} {errors}")
        print(" ".join(f"{x:.0f}" for x in lat), flush=True)


def list_bench(rows):
    with connect() as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        cfg = {"configurable": {"thread_id": "template", "checkpoint_ns": ""}}
        put(saver, cfg, "template")
        conn.execute(
            """INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,
                   parent_checkpoint_id, type, checkpoint, metadata)
               SELECT 'thread' || (i %% 1000), '', lpad(i::text, 12, '0'),
                      lpad((i - 1000)::text, 12, '0'), t.type, t.checkpoint, t.metadata
               FROM generate_series(1, %s) AS i,
                    (SELECT type, checkpoint, metadata FROM checkpoints
                     WHERE thread_id = 'template') AS t""",
            (rows,),
        )
        conn.execute("VACUUM ANALYZE")
        one = {"configurable": {"thread_id": "thread7", "checkpoint_ns": ""}}
        got = list(saver.list(one, limit=20))
        assert len(got) == 20, len(got)
        for _ in range(50):
            list(saver.list(one, limit=20))
        lat = []
        for _ in range(1000):
            t = time.perf_counter()
            list(saver.list(one, limit=20))
            lat.append((time.perf_counter() - t) * 1e6)
        lat.sort()
        print(f"{lat[500]:.0f} {lat[990]:.0f} {rows}", flush=True)


def main():
    if sys.argv[1] == "setup":
        with connect() as conn:
            PostgresSaver(conn).setup()
    elif sys.argv[1] == "list":
        list_bench(int(sys.argv[2]))
    elif sys.argv[1] == "worker":
        worker(float(sys.argv[2]))
    else:
        sys.exit(f"pg_langgraph: unknown mode {sys.argv[1]!r}")


if __name__ == "__main__":
    main()
