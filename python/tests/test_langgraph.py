"""logbook_ledger.langgraph beyond the conformance suite: what a thread and
its checkpoints look like in the ledger (docs/python.md, "LangGraph")."""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402

import logbook_ledger as lb  # noqa: E402
from logbook_ledger.langgraph import APP, WRITES_EVENT, LogbookSaver  # noqa: E402


def put(saver, thread_id, parent=None, values=None):
    cp = empty_checkpoint()
    cp["channel_values"] = values or {}
    cp["channel_versions"] = {k: saver.get_next_version(None, None) for k in cp["channel_values"]}
    conf = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    if parent:
        conf["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    return saver.put(conf, cp, {"source": "loop", "step": 0}, cp["channel_versions"])


def test_a_thread_is_a_session_and_a_checkpoint_a_checkpoint(db_path):
    with LogbookSaver.from_conn_string(db_path) as saver:
        c1 = put(saver, "t-1", values={"msg": "hi"})
        c2 = put(saver, "t-1", parent=c1, values={"msg": "bye", "raw": b"\x00\xff"})
        saver.put_writes(c2, [("msg", "pending")], task_id="task-1")
        tup = saver.get_tuple({"configurable": {"thread_id": "t-1"}})
        assert tup.checkpoint["channel_values"] == {"msg": "bye", "raw": b"\x00\xff"}
        assert tup.parent_config["configurable"]["checkpoint_id"] == c1["configurable"]["checkpoint_id"]
        assert tup.pending_writes == [("task-1", "msg", "pending")]
    with lb.Ledger(db_path) as led:
        (s,) = led.list_sessions(app=APP)["sessions"]
        assert s["status"] == "active"
        types = [e["type"] for e in led.show_session(s["session_id"])["events"]]
        assert types == ["created", "checkpoint", "checkpoint", WRITES_EVENT]
        state = led.snapshot(s["session_id"])["state"]
        assert state["checkpoint_id"] == c2["configurable"]["checkpoint_id"]
        assert state["checkpoint"]["type"] in ("msgpack", "json", "pickle")
        assert led.verify()["sessions"] == 1


def test_delete_thread_purges_with_a_tombstone(db_path):
    with LogbookSaver.from_conn_string(db_path) as saver:
        put(saver, "gone")
        keep = put(saver, "kept")
        sid = saver.ledger.list_sessions(app=APP, limit=10)["sessions"][-1]["session_id"]
        saver.delete_thread("gone")
        assert saver.get_tuple({"configurable": {"thread_id": "gone"}}) is None
        assert saver.get_tuple(keep) is not None
        with pytest.raises(lb.SessionNotFound) as ei:
            saver.ledger.show_session(sid)
        assert "purge_id" in ei.value.details
        # The thread can start again: a new session.
        put(saver, "gone")
        assert saver.get_tuple({"configurable": {"thread_id": "gone"}}) is not None


def test_a_second_saver_sees_the_delete(db_path):
    with LogbookSaver.from_conn_string(db_path) as a, LogbookSaver.from_conn_string(db_path) as b:
        put(a, "t")
        assert b.get_tuple({"configurable": {"thread_id": "t"}}) is not None
        b.delete_thread("t")
        # a's cached session was purged: its next put starts a new one.
        put(a, "t")
        assert len(list(b.list({"configurable": {"thread_id": "t"}}))) == 1
