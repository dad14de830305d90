"""LangGraph's conformance suite (every capability, base and extended) and
the Ledger binding on PostgreSQL (LOGBOOK_TEST_PG, a throwaway server .ci/pg
starts): each test on a fresh database."""

from __future__ import annotations

import os

import pytest

from pg import fresh_database, skip_reason

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

pytest.importorskip("langgraph.checkpoint.conformance")

from conformance import check_conformance  # noqa: E402
from langgraph.checkpoint.conformance import checkpointer_test  # noqa: E402

import logbook_ledger as lb  # noqa: E402
from logbook_ledger.langgraph import AsyncLogbookSaver, LogbookSaver  # noqa: E402


@checkpointer_test(name="LogbookSaver (PostgreSQL)")
async def pg_saver():
    with fresh_database() as url:
        with LogbookSaver.from_conn_string(url) as saver:
            yield saver


@checkpointer_test(name="AsyncLogbookSaver (PostgreSQL)")
async def pg_async_saver():
    with fresh_database() as url:
        async with AsyncLogbookSaver.from_conn_string(url) as saver:
            yield saver


@pytest.mark.parametrize("factory", [pg_saver, pg_async_saver], ids=["sync", "async"])
async def test_conformance_all_capabilities_on_postgres(factory, capsys):
    await check_conformance(factory, capsys)


def test_ledger_on_postgres():
    with fresh_database() as url:
        with lb.Ledger(url) as led:
            assert led.path.startswith("postgres://")
            assert os.environ["LOGBOOK_TEST_PG"].split("@")[0].split(":")[-1] not in led.path
            sid = led.create_session("on the server")["session_id"]
            led.checkpoint(sid, step="one", state={"v": 1})
            with pytest.raises(lb.SessionConflict) as ei:
                led.complete(sid, result="done", if_rev=1)
            assert ei.value.retryable is True
            assert led.complete(sid, result="done", if_rev=2)["rev"] == 3
            assert led.snapshot(sid)["state"] == {"v": 1}
            assert [e["type"] for e in led.show_session(sid)["events"]] == [
                "created", "checkpoint", "completed",
            ]


def _put_a_b_a(saver):
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.serde.types import ERROR

    cfg = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    c0 = saver.put(cfg, empty_checkpoint(), {"step": 0}, {})
    cp = empty_checkpoint()
    a = dict(cp, channel_values={"x": "A"})
    b = dict(cp, channel_values={"x": "B"})
    saver.put(c0, a, {"step": 1}, {})
    saver.put(c0, b, {"step": 1}, {})
    c1 = saver.put(c0, a, {"step": 1}, {})
    for err in ("errA", "errB", "errA"):
        saver.put_writes(c1, [(ERROR, err)], "task1")
    t = saver.get_tuple(c1)
    return t.checkpoint["channel_values"], t.pending_writes


def test_the_same_content_put_again_is_a_new_write_on_both_backends(db_path):
    # Put A, put B, put A again (one checkpoint id): the last write wins on
    # either backend, as on LangGraph's own savers; on a server each write
    # is one keyed statement, and a key of its own per write keeps the
    # third put from replaying the first.
    expected = ({"x": "A"}, [("task1", "__error__", "errA")])
    with LogbookSaver.from_conn_string(db_path) as saver:
        assert _put_a_b_a(saver) == expected
    with fresh_database() as url:
        with LogbookSaver.from_conn_string(url) as saver:
            assert _put_a_b_a(saver) == expected
