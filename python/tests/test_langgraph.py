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


def test_copy_thread_is_a_child_session(db_path):
    with LogbookSaver.from_conn_string(db_path) as saver:
        c1 = put(saver, "src", values={"n": 1})
        c2 = put(saver, "src", parent=c1, values={"n": 2})
        saver.put_writes(c2, [("n", 3)], task_id="task-1")
        saver.copy_thread("src", "dst")
        src = saver._find("src")
        dst = saver._find("dst")
        assert dst != src
        shown = saver.ledger.show_session(dst)
        assert shown["session"]["parent_session_id"] == src
        assert shown["session"]["metadata"]["langgraph"]["copied_from"] == src
        assert saver.ledger.show_session(src)["children"]["active"] == 1
        assert [e["type"] for e in shown["events"]] == [
            "created", "checkpoint", "checkpoint", WRITES_EVENT,
        ]
        tup = saver.get_tuple({"configurable": {"thread_id": "dst"}})
        assert tup.checkpoint["channel_values"] == {"n": 2}
        assert tup.pending_writes == [("task-1", "n", 3)]
        assert tup.config["configurable"]["thread_id"] == "dst"
        # A source with no session copies nothing and makes no session.
        saver.copy_thread("nothing", "dst-2")
        assert saver._find("dst-2") is None
        # Deleting the source leaves the copy; the source is cancelled and
        # waits for its live child before it can be purged (README, "Retention").
        saver.delete_thread("src")
        assert saver.get_tuple({"configurable": {"thread_id": "src"}}) is None
        assert saver.get_tuple({"configurable": {"thread_id": "dst"}}) is not None
        assert saver.ledger.show_session(src)["session"]["status"] == "cancelled"


def test_prune_supersedes_the_session_and_purges_the_old(db_path):
    with LogbookSaver.from_conn_string(db_path) as saver, LogbookSaver.from_conn_string(
        db_path
    ) as other:
        c1 = put(saver, "t", values={"n": 1})
        c2 = put(saver, "t", parent=c1, values={"n": 2})
        saver.put_writes(c2, [("n", 3)], task_id="task-1")
        old = saver._find("t")
        assert other._find("t") == old
        saver.prune(["t"])
        new = saver._find("t")
        assert new != old
        assert saver.ledger.show_session(new)["session"]["metadata"]["langgraph"]["supersedes"] == old
        with pytest.raises(lb.SessionNotFound) as ei:
            saver.ledger.show_session(old)
        assert "purge_id" in ei.value.details
        assert [t.config["configurable"]["checkpoint_id"] for t in saver.list({"configurable": {"thread_id": "t"}})] == [
            c2["configurable"]["checkpoint_id"]
        ]
        # A saver that cached the old session writes to the new one.
        put(other, "t", parent=c2, values={"n": 4})
        assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 2
        saver.prune(["t"])
        last = saver._find("t")
        assert last != new
        assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 1
        # Nothing left to drop: the session stays.
        saver.prune(["t"])
        assert saver._find("t") == last
        saver.prune(["t"], strategy="delete")
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None
        with pytest.raises(ValueError):
            saver.prune(["t"], strategy="keep_some")


def test_delete_for_runs_keeps_the_other_runs(db_path):
    with LogbookSaver.from_conn_string(db_path) as saver:
        def put_run(thread_id, run_id, parent=None):
            cp = empty_checkpoint()
            conf = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            if parent:
                conf["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
            return saver.put(conf, cp, {"source": "loop", "step": 0, "run_id": run_id}, {})

        a1 = put_run("a", "run-1")
        a2 = put_run("a", "run-2", a1)
        saver.put_writes(a2, [("x", 1)], task_id="task")
        b1 = put_run("b", "run-1")
        before = saver._find("a")
        saver.delete_for_runs(["run-1"])
        runs = [t.metadata["run_id"] for t in saver.list({"configurable": {"thread_id": "a"}})]
        assert runs == ["run-2"]
        assert saver.get_tuple(a2).pending_writes == [("task", "x", 1)]
        # b had only run-1: deleted as delete_thread does.
        assert saver.get_tuple(b1) is None
        assert saver._find("b") is None
        assert saver._find("a") != before  # superseded
        # Unknown runs, or none: nothing changes.
        kept = saver._find("a")
        saver.delete_for_runs(["run-9"])
        saver.delete_for_runs([])
        assert saver._find("a") == kept


def test_the_serializers_bytes_are_the_snapshots_payload_at_their_size(db_path):
    # docs/schema.md, "session_snapshots": the checkpoint's and metadata's
    # bytes, one after the other, as the payload; the state holds their
    # types and sizes only, so a checkpoint costs its bytes and a small
    # constant, whatever its size.
    import sqlite3

    big = bytes(range(256)) * 4096  # 1 MiB: over the old hex cap of ~128 KiB
    with LogbookSaver.from_conn_string(db_path) as saver:
        c1 = put(saver, "t-bytes", values={"raw": big})
        c2 = put(saver, "t-bytes", parent=c1, values={"raw": b"\x00"})
        cp_type, cp_bytes = saver.serde.dumps_typed(
            saver.get_tuple(c1).checkpoint
        )
        tup = saver.get_tuple(c1)
        assert tup.checkpoint["channel_values"]["raw"] == big
        assert saver.get_tuple(c2).checkpoint["channel_values"]["raw"] == b"\x00"
    con = sqlite3.connect(db_path)
    rows = con.execute(
        "SELECT length(CAST(state AS BLOB)), length(payload) FROM session_snapshots ORDER BY seq"
    ).fetchall()
    con.close()
    assert len(rows) == 2
    state_len, payload_len = rows[0]
    assert state_len < 400
    # The payload is the checkpoint's bytes plus the metadata's (tens of bytes).
    assert len(cp_bytes) <= payload_len < len(cp_bytes) + 200
    assert payload_len < len(big) + 1024
    with lb.Ledger(db_path) as led:
        (s,) = led.list_sessions(app=APP)["sessions"]
        snap = led.snapshot(s["session_id"], checkpoint=1)
        st = snap["state"]
        assert st["v"] == 2
        n = st["checkpoint"]["bytes"]
        assert snap["payload"][:n] == cp_bytes
        assert n + st["metadata"]["bytes"] == len(snap["payload"]) == payload_len
        assert led.verify()["sessions"] == 1


def test_checkpoints_written_with_hex_state_still_read_back(db_path):
    # Before schema V11 the bytes were hex in the state ("v": 1); such a
    # checkpoint (written here as that saver wrote it) reads back the same.
    from logbook_ledger import langgraph as lg

    with LogbookSaver.from_conn_string(db_path) as saver:
        c1 = put(saver, "t-old", values={"msg": "new"})
        cp = empty_checkpoint()
        cp["channel_values"] = {"msg": "old"}
        cp_type, cp_bytes = saver.serde.dumps_typed(cp)
        md_type, md_bytes = saver.serde.dumps_typed({"source": "loop", "step": 5})
        sid = saver.ledger.list_sessions(app=APP)["sessions"][0]["session_id"]
        state = {
            "v": 1,
            "checkpoint_ns": "",
            "checkpoint_id": cp["id"],
            "parent_checkpoint_id": c1["configurable"]["checkpoint_id"],
            "checkpoint": {"type": cp_type, "hex": cp_bytes.hex()},
            "metadata": {"type": md_type, "hex": md_bytes.hex()},
        }
        step = f"{lg._STEP}{lg._ns_key('')} {lg._hex(cp['id'])}"
        saver.ledger.checkpoint(sid, step=step, state=state)
    with LogbookSaver.from_conn_string(db_path) as saver:
        tup = saver.get_tuple({"configurable": {"thread_id": "t-old", "checkpoint_id": cp["id"]}})
        assert tup.checkpoint["channel_values"] == {"msg": "old"}
        assert tup.metadata["step"] == 5
        assert [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": "t-old"}})] == [
            cp["id"],
            c1["configurable"]["checkpoint_id"],
        ]
        # A copy carries both forms as they are.
        saver.copy_thread("t-old", "t-copy")
        got = saver.get_tuple({"configurable": {"thread_id": "t-copy", "checkpoint_id": cp["id"]}})
        assert got.checkpoint["channel_values"] == {"msg": "old"}


def test_a_checkpoint_over_the_payload_cap_is_refused_and_writes_nothing(db_path):
    with LogbookSaver.from_conn_string(db_path) as saver:
        c1 = put(saver, "t-cap", values={"msg": "small"})
        with pytest.raises(lb.InvalidArgument) as ei:
            put(saver, "t-cap", parent=c1, values={"raw": b"\x01" * (16 * 1024 * 1024 + 1)})
        assert ei.value.details.get("field") == "payload"
        assert [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": "t-cap"}})] == [
            c1["configurable"]["checkpoint_id"]
        ]
