"""logbook_ledger.Ledger: the library's verbs from Python (docs/python.md)."""

from __future__ import annotations

import threading

import pytest

import logbook_ledger as lb


def types(ledger, sid):
    return [e["type"] for e in ledger.show_session(sid)["events"]]


def test_lifecycle_revs_and_events(ledger):
    s = ledger.create_session("ship billing v3", app="billing", tag=["deploy", "v3"], pending=True)
    sid = s["session_id"]
    assert (s["status"], s["rev"], s["tags"], s["app"]) == ("pending", 1, ["deploy", "v3"], "billing")
    assert s.replayed is None
    assert ledger.start(sid, if_rev=1)["rev"] == 2
    c = ledger.checkpoint(sid, step="deploy", note="canary at 10%", plan="plan-7", state={"n": 1})
    assert (c["rev"], c["checkpoint"]["step"], c["plan_ids"]) == (3, "deploy", ["plan-7"])
    assert ledger.pause(sid, reason="waiting")["status"] == "paused"
    assert ledger.resume(sid)["status"] == "active"
    e = ledger.append_event(sid, type="x.test_run", detail="42 passed", data={"passed": 42})
    assert e["rev"] == 6
    done = ledger.complete(sid, result="shipped", if_rev=6)
    assert (done["status"], done["rev"], done["final_result"]) == ("completed", 7, "shipped")
    assert types(ledger, sid) == [
        "created", "started", "checkpoint", "paused", "resumed", "x.test_run", "completed",
    ]
    view = ledger.show_session(sid)
    assert [ev["seq"] for ev in view["events"]] == list(range(7))
    assert view["events"][5]["data"] == {"passed": 42}


def test_fail_and_cancel(ledger):
    a = ledger.create_session("a")["session_id"]
    b = ledger.create_session("b", pending=True)["session_id"]
    assert ledger.fail(a, reason="canary regressed")["status"] == "failed"
    assert ledger.cancel(b, reason="superseded")["status"] == "cancelled"
    with pytest.raises(lb.SessionInvalidTransition) as ei:
        ledger.complete(a, result="late")
    assert ei.value.code == "SESSION_INVALID_TRANSITION"
    assert ei.value.retryable is False


def test_conflict_carries_the_stable_code_and_details(ledger):
    sid = ledger.create_session("t")["session_id"]
    ledger.checkpoint(sid, step="one")
    with pytest.raises(lb.SessionConflict) as ei:
        ledger.checkpoint(sid, step="two", if_rev=1)
    err = ei.value
    assert isinstance(err, lb.LogbookError)
    assert (err.code, err.retryable) == ("SESSION_CONFLICT", True)
    assert err.details["expected_rev"] == 1
    assert err.details["current_rev"] == 2
    assert err.details["latest_event"] == {"seq": 1, "step": "one", "type": "checkpoint"}
    assert "rev 2" in str(err)
    # Nothing was written.
    assert ledger.show_session(sid)["session"]["rev"] == 2


def test_not_found_and_invalid_argument(ledger):
    with pytest.raises(lb.SessionNotFound) as ei:
        ledger.show_session("ses_0000000000000000")
    assert ei.value.code == "SESSION_NOT_FOUND"
    assert ei.value.details == {"session_id": "ses_0000000000000000"}
    with pytest.raises(lb.InvalidArgument) as ei:
        ledger.show_session("nope")
    assert ei.value.details["field"] == "session_id"
    with pytest.raises(lb.InvalidArgument) as ei:
        ledger.create_session("x" * 201)
    assert ei.value.details["field"] == "title"
    with pytest.raises(lb.InvalidArgument) as ei:
        ledger.create_session("t", context={"when": object()})
    assert ei.value.details["field"] == "context"
    with pytest.raises(lb.InvalidArgument) as ei:
        ledger.list_sessions(order="sideways")
    assert ei.value.details["field"] == "order"


def test_every_code_has_its_class():
    assert len(lb.ERROR_CODES) >= 20
    for wire, (exit_code, retryable, description) in lb.ERROR_CODES.items():
        cls = getattr(lb, "".join(p.capitalize() for p in wire.split("_")))
        assert issubclass(cls, lb.LogbookError)
        assert isinstance(exit_code, int) and isinstance(retryable, bool) and description
    assert lb.ERROR_CODES["STORE_BUSY"][:2] == (4, True)


def test_idempotency_key_replays(ledger):
    s1 = ledger.create_session("t", idempotency_key="create-1")
    s2 = ledger.create_session("t", idempotency_key="create-1")
    assert s1["session_id"] == s2["session_id"]
    assert s1.replayed is None and s2.replayed == {"rev": 1, "seq": 0}
    sid = s1["session_id"]
    c1 = ledger.checkpoint(sid, step="s", idempotency_key="cp-1")
    c2 = ledger.checkpoint(sid, step="s", idempotency_key="cp-1")
    assert c1["rev"] == c2["rev"] == 2
    assert c2.replayed == {"rev": 2, "seq": 1}
    with pytest.raises(lb.InvalidArgument):
        ledger.checkpoint(sid, step="other", idempotency_key="cp-1")
    assert types(ledger, sid) == ["created", "checkpoint"]


def test_list_filters_and_cursor(ledger):
    ids = [ledger.create_session(f"s{i}", app="a" if i % 2 else "b")["session_id"] for i in range(5)]
    ledger.complete(ids[0], result="ok")
    page = ledger.list_sessions(app="a", limit=1)
    assert [s["session_id"] for s in page["sessions"]] == [ids[3]]
    page2 = ledger.list_sessions(app="a", limit=1, cursor=page["next_cursor"])
    assert [s["session_id"] for s in page2["sessions"]] == [ids[1]]
    done = ledger.list_sessions(status="completed")
    assert [s["session_id"] for s in done["sessions"]] == [ids[0]]
    live = ledger.list_sessions(status=["active", "paused"], since=0)
    assert len(live["sessions"]) == 4


def test_feed_cursor_and_session_events(ledger):
    sid = ledger.create_session("t")["session_id"]
    for i in range(3):
        ledger.append_event(sid, type="x.tick", data={"i": i})
    p1 = ledger.feed(limit=2)
    assert [e["type"] for e in p1["events"]] == ["created", "x.tick"]
    p2 = ledger.feed(after=p1["next_cursor"], type="x.tick")
    assert [e["data"]["i"] for e in p2["events"]] == [1, 2]
    assert ledger.feed(after=p2["next_cursor"])["events"] == []
    ev = ledger.session_events(sid, after_seq=1, limit=1)
    assert [e["seq"] for e in ev["events"]] == [2]


def test_snapshots_restore_fork(ledger):
    sid = ledger.create_session("t", context={"v": 0})["session_id"]
    ledger.checkpoint(sid, step="one", state={"v": 1})
    ledger.checkpoint(sid, step="two", state={"v": 2})
    cps = ledger.checkpoints(sid)["checkpoints"]
    assert [(c["seq"], c["step"]) for c in cps] == [(1, "one"), (2, "two")]
    assert ledger.snapshot(sid)["state"] == {"v": 2}
    assert ledger.snapshot(sid, checkpoint=1)["state"] == {"v": 1}
    with pytest.raises(lb.CheckpointNotFound):
        ledger.snapshot(sid, checkpoint=7)
    r = ledger.restore(sid, checkpoint=1, if_rev=3)
    assert (r["rev"], r["context"]) == (4, {"v": 1})
    child = ledger.fork(sid, checkpoint=2, title="retry")
    assert (child["parent_session_id"], child["context"], child["title"]) == (sid, {"v": 2}, "retry")


def test_a_snapshot_payload_is_bytes_kept_exactly(ledger):
    sid = ledger.create_session(
        "t", checkpoint={"step": "one", "state": {"v": 1}, "payload": b"\x00\xffsk-secret-looking"}
    )["session_id"]
    ledger.checkpoint(sid, step="two", state={"v": 2}, payload=bytearray(b"\x01\x02"))
    ledger.checkpoint(sid, step="three", state={"v": 3})
    assert ledger.snapshot(sid, checkpoint=1)["payload"] == b"\x00\xffsk-secret-looking"
    two = ledger.snapshot(sid, checkpoint=2)
    assert (two["payload"], two["payload_bytes"]) == (b"\x01\x02", 2)
    assert ledger.snapshot(sid)["payload"] is None
    cps = ledger.checkpoints(sid)["checkpoints"]
    assert [c.get("payload_bytes") for c in cps] == [19, 2, None]
    rev = ledger.show_session(sid)["session"]["rev"]
    for kwargs, field in [
        ({"step": "x", "payload": b"1"}, "payload"),
        ({"state": {}, "payload": "text"}, "payload"),
        ({"state": {}, "payload": [1, 2]}, "payload"),
    ]:
        with pytest.raises(lb.InvalidArgument) as ei:
            ledger.checkpoint(sid, **kwargs)
        assert ei.value.details["field"] == field
    assert ledger.show_session(sid)["session"]["rev"] == rev
    assert ledger.verify()["sessions"] == 1


def test_create_with_a_first_checkpoint(ledger):
    s = ledger.create_session(
        "t", app="a", checkpoint={"step": "one", "note": "n", "plan": "p-1", "state": {"v": 1}}
    )
    assert (s["rev"], s["checkpoint"]["seq"], s["checkpoint"]["step"]) == (2, 1, "one")
    assert s["plan_ids"] == ["p-1"]
    sid = s["session_id"]
    events = ledger.session_events(sid)["events"]
    assert [(e["seq"], e["type"], e["detail"]) for e in events] == [
        (0, "created", "session created"),
        (1, "checkpoint", "n"),
    ]
    assert ledger.snapshot(sid, checkpoint=1)["state"] == {"v": 1}
    before = len(ledger.list_sessions()["sessions"])
    for bad, field in [
        ({"stage": "x"}, "checkpoint"),
        ({}, "checkpoint"),
        ({"step": 3}, "step"),
        ({"state": [1]}, "state"),
    ]:
        with pytest.raises(lb.InvalidArgument) as ei:
            ledger.create_session("t", checkpoint=bad)
        assert ei.value.details["field"] == field
    with pytest.raises(lb.InvalidArgument):
        ledger.create_session("t", pending=True, checkpoint={"step": "one"})
    assert len(ledger.list_sessions()["sessions"]) == before


def test_verify_and_purge(ledger):
    sid = ledger.create_session("old", app="tmp")["session_id"]
    keep = ledger.create_session("live", app="tmp")["session_id"]
    ledger.cancel(sid, reason="done with it")
    assert ledger.verify()["sessions"] == 2
    plan = ledger.purge(app="tmp", dry_run=True)
    assert plan["sessions"] == 1
    with pytest.raises(lb.InvalidArgument) as ei:
        ledger.purge()
    assert ei.value.details["field"] == "filter"
    report = ledger.purge(app="tmp")
    assert report["sessions"] == 1 and report["purge_id"] is not None
    with pytest.raises(lb.SessionNotFound) as ei:
        ledger.show_session(sid)
    assert ei.value.details["purge_id"] == report["purge_id"]
    assert ledger.show_session(keep)["session"]["status"] == "active"
    assert ledger.verify()["purged"] == 1


def test_read_only_and_closed(db_path):
    with lb.Ledger(db_path) as led:
        sid = led.create_session("t")["session_id"]
    ro = lb.Ledger(db_path, read_only=True)
    assert ro.show_session(sid)
    with pytest.raises(lb.StoreIo):
        ro.complete(sid, result="x")
    ro.close()
    ro.close()
    with pytest.raises(lb.InvalidArgument):
        ro.show_session(sid)


def test_db_resolves_like_the_cli(monkeypatch, tmp_path):
    monkeypatch.setenv("LOGBOOK_DB", str(tmp_path / "env.db"))
    with lb.Ledger() as led:
        assert led.path == str(tmp_path / "env.db")
    with pytest.raises(lb.InvalidArgument) as ei:
        lb.Ledger(":memory:")
    assert ei.value.code == "INVALID_ARGUMENT"
    with pytest.raises(lb.InvalidArgument):
        lb.Ledger(str(tmp_path / "x.db"), busy_timeout_ms=3_600_001)


def test_one_ledger_shared_between_threads(ledger):
    sid = ledger.create_session("shared")["session_id"]
    errors = []

    def worker(n):
        try:
            for i in range(25):
                ledger.append_event(sid, type="x.work", data={"worker": n, "i": i})
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    view = ledger.show_session(sid)
    assert [e["seq"] for e in view["events"]] == list(range(101))
    assert ledger.verify([sid])["sessions"] == 1


def test_if_rev_race_between_threads(ledger):
    # Two threads checkpoint with the same if_rev: exactly one wins, the
    # other gets SESSION_CONFLICT (retryable).
    sid = ledger.create_session("race")["session_id"]
    results = []
    barrier = threading.Barrier(2)

    def worker(step):
        barrier.wait()
        try:
            ledger.checkpoint(sid, step=step, if_rev=1)
            results.append("ok")
        except lb.SessionConflict as e:
            results.append(e.code)

    threads = [threading.Thread(target=worker, args=(s,)) for s in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["SESSION_CONFLICT", "ok"]
