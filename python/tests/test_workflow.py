"""Runs, usage, budgets, gates and leases from Python (docs/python.md)."""

from __future__ import annotations

import pytest

import logbook_ledger as lb


def types(ledger, sid):
    return [e["type"] for e in ledger.show_session(sid)["events"]]


def test_run_lifecycle(ledger):
    sid = ledger.create_session("t")["session_id"]
    run = ledger.create_run(sid, input={"q": "why"})
    rid = run["run_id"]
    assert run["status"] == "pending"
    assert ledger.start_run(rid)["status"] == "running"
    assert ledger.run_usage(rid, input_tokens=10, output_tokens=5)["usage"]["input_tokens"] == 10
    assert ledger.run_turn(rid)["turn_count"] == 1
    done = ledger.complete_run(rid, output={"a": 42})
    assert (done["status"], done["output"]) == ("completed", {"a": 42})
    with pytest.raises(lb.RunInvalidTransition) as ei:
        ledger.cancel_run(rid)
    assert ei.value.code == "RUN_INVALID_TRANSITION"
    r2 = ledger.create_run(sid)["run_id"]
    ledger.start_run(r2)
    assert ledger.fail_run(r2, code="E_TIMEOUT", message="upstream")["error"]["code"] == "E_TIMEOUT"
    assert [r["run_id"] for r in ledger.list_runs(sid, status="completed")] == [rid]
    assert ledger.get_run(rid)["run_id"] == rid
    with pytest.raises(lb.RunNotFound):
        ledger.get_run("run_0000000000000000")
    with pytest.raises(lb.InvalidArgument) as ei:
        ledger.list_runs(sid, status="sideways")
    assert ei.value.details["field"] == "status"


def test_budget_pauses_the_session(ledger):
    sid = ledger.create_session("t")["session_id"]
    ledger.budget(sid, max_tokens=100, on_exceed="pause")
    assert ledger.budget(sid)["max_tokens"] == 100
    s = ledger.usage(sid, input_tokens=80, output_tokens=30)
    assert s["status"] == "paused"
    assert "budget_exceeded" in types(ledger, sid)
    ledger.budget(sid, reset=True)
    with pytest.raises(lb.InvalidArgument) as ei:
        ledger.budget(sid, on_exceed="explode")
    assert ei.value.details["field"] == "on_exceed"


def test_gates(ledger):
    sid = ledger.create_session("t")["session_id"]
    s = ledger.open_gate(sid, gate="deploy", kind="user-approval")
    assert s["status"] == "paused"
    with pytest.raises(lb.GatePending):
        ledger.resume(sid)
    ledger.approve_gate(sid, gate="deploy", note="ok")
    with pytest.raises(lb.GateAlreadyDecided):
        ledger.reject_gate(sid, gate="deploy", reason="late")
    with pytest.raises(lb.GateNotFound):
        ledger.approve_gate(sid, gate="nope")
    assert [g["name"] for g in ledger.gates(sid)["gates"]] == ["deploy"]


def test_leases(ledger):
    sid = ledger.create_session("t")["session_id"]
    lease = ledger.lock(sid, ttl_ms=60_000)
    token = lease["token"]
    # The lease's owner is this process; a mutation presenting the token
    # applies.
    assert ledger.checkpoint(sid, step="held", lease=token)["rev"] >= 2
    ledger.unlock(sid, lease=token)
    with pytest.raises(lb.LeaseNotFound):
        ledger.unlock(sid, lease=token)
