"""The LangGraph saver's read path keeps what it has read of a thread between
calls (BENCHMARKS.md, "Python package"): what another saver writes, purges or
puts out of order must still read back as it would from a fresh saver."""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402

import logbook_ledger.langgraph as lg  # noqa: E402
from logbook_ledger.langgraph import LogbookSaver  # noqa: E402


def put(saver, thread_id, cid, value, ns="", parent=None):
    cp = empty_checkpoint()
    cp["id"] = cid
    cp["channel_values"] = {"v": value}
    conf = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    if parent:
        conf["configurable"]["checkpoint_id"] = parent
    return saver.put(conf, cp, {"source": "loop", "step": 0, "v": value}, {})


def cfg(thread_id, ns="", cid=None):
    c = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    if cid:
        c["configurable"]["checkpoint_id"] = cid
    return c


def view(saver, thread_id, ns=""):
    """Everything the reads return for a thread, comparable."""
    newest = saver.get_tuple(cfg(thread_id, ns))
    rows = [
        (t.config["configurable"]["checkpoint_id"], t.checkpoint["channel_values"], t.pending_writes)
        for t in saver.list(cfg(thread_id, ns))
    ]
    top = None
    if newest is not None:
        top = (newest.config["configurable"]["checkpoint_id"], newest.pending_writes)
    return top, rows


def test_another_savers_writes_are_read(db_path):
    with LogbookSaver.from_conn_string(db_path) as a, LogbookSaver.from_conn_string(db_path) as b:
        put(a, "t", "01", "one")
        assert b.get_tuple(cfg("t")).checkpoint["channel_values"] == {"v": "one"}
        c2 = put(a, "t", "02", "two", parent="01")
        a.put_writes(c2, [("v", "pending")], task_id="task-1")
        tup = b.get_tuple(cfg("t"))
        assert tup.checkpoint["channel_values"] == {"v": "two"}
        assert tup.pending_writes == [("task-1", "v", "pending")]
        # Writes for an older checkpoint, after newer ones (seqs apart).
        a.put_writes(cfg("t", cid="01"), [("v", "late")], task_id="task-0")
        assert b.get_tuple(cfg("t", cid="01")).pending_writes == [("task-0", "v", "late")]
        with LogbookSaver.from_conn_string(db_path) as fresh:
            assert view(b, "t") == view(fresh, "t") == view(a, "t")


def test_ids_out_of_order_and_put_twice(db_path):
    with LogbookSaver.from_conn_string(db_path) as s:
        for cid, v in [("05", "a"), ("02", "b"), ("09", "c"), ("05", "d")]:
            put(s, "t", cid, v)
        put(s, "t", "07", "other ns", ns="sub")
        assert s.get_tuple(cfg("t")).checkpoint["channel_values"] == {"v": "c"}
        assert s.get_tuple(cfg("t", cid="05")).checkpoint["channel_values"] == {"v": "d"}
        assert s.get_tuple(cfg("t", ns="sub")).checkpoint["channel_values"] == {"v": "other ns"}
        ids = [t.config["configurable"]["checkpoint_id"] for t in s.list(cfg("t"))]
        assert ids == ["09", "05", "02"]
        before = {"configurable": {"checkpoint_id": "09"}}
        got = [t.config["configurable"]["checkpoint_id"] for t in s.list(cfg("t"), before=before)]
        assert got == ["05", "02"]
        got = [t.config["configurable"]["checkpoint_id"] for t in s.list(cfg("t"), limit=2)]
        assert got == ["09", "05"]
        got = [t.config["configurable"]["checkpoint_id"] for t in s.list(cfg("t", cid="02"))]
        assert got == ["02"]
        got = list(s.list(cfg("t"), filter={"v": "b"}, limit=1))
        assert [t.config["configurable"]["checkpoint_id"] for t in got] == ["02"]
        every = {"configurable": {"thread_id": "t"}}
        assert [t.config["configurable"]["checkpoint_id"] for t in s.list(every)] == [
            "09",
            "07",
            "05",
            "02",
        ]


def test_a_purge_by_another_saver_is_seen(db_path):
    with LogbookSaver.from_conn_string(db_path) as a, LogbookSaver.from_conn_string(db_path) as b:
        put(a, "t", "01", "one")
        assert b.get_tuple(cfg("t")) is not None
        a.delete_thread("t")
        assert b.get_tuple(cfg("t")) is None
        put(a, "t", "03", "again")
        assert b.get_tuple(cfg("t")).checkpoint["channel_values"] == {"v": "again"}
        assert [t.checkpoint["channel_values"] for t in b.list(cfg("t"))] == [{"v": "again"}]


def test_a_small_cache_reads_the_same(db_path, monkeypatch):
    monkeypatch.setattr(lg, "_ROWS_MAX", 3)
    with LogbookSaver.from_conn_string(db_path) as s:
        prev = None
        for i in range(12):
            c = put(s, "t", f"{i:02}", i, parent=prev)
            prev = c["configurable"]["checkpoint_id"]
            s.put_writes(c, [("v", i), ("w", -i)], task_id=f"task-{i}")
        first = view(s, "t")
        assert len(s._rows) <= 3
        assert view(s, "t") == first
        with LogbookSaver.from_conn_string(db_path) as fresh:
            assert view(fresh, "t") == first
        assert first[1][0][2] == [("task-11", "v", 11), ("task-11", "w", -11)]
