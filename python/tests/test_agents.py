"""logbook_ledger.agents.LogbookSession: the OpenAI Agents SDK's Session
protocol, with the behaviour the SDK's own SQLiteSession has (its tests'
cases: order, limit, pop, clear, isolation), recorded as events."""

from __future__ import annotations

import asyncio

import pytest
from pg import fresh_database, skip_reason

import logbook_ledger as lb
from logbook_ledger.agents import APP, CLEAR_EVENT, ITEMS_EVENT, POP_EVENT, LogbookSession


def msg(role, text):
    return {"role": role, "content": text}


async def test_add_get_limit_pop_clear(db_path):
    s = LogbookSession("conv-1", db_path)
    assert await s.get_items() == []
    assert await s.pop_item() is None
    await s.add_items([msg("user", "hi"), msg("assistant", "hello")])
    await s.add_items([msg("user", "how are you")])
    assert [i["content"] for i in await s.get_items()] == ["hi", "hello", "how are you"]
    assert [i["content"] for i in await s.get_items(limit=2)] == ["hello", "how are you"]
    assert await s.get_items(limit=0) == []
    assert (await s.pop_item())["content"] == "how are you"
    assert (await s.pop_item())["content"] == "hello"
    assert [i["content"] for i in await s.get_items()] == ["hi"]
    await s.clear_session()
    assert await s.get_items() == []
    await s.add_items([msg("user", "again")])
    assert [i["content"] for i in await s.get_items()] == ["again"]
    s.close()
    # Nothing was deleted: every change is an event of one session.
    with lb.Ledger(db_path) as led:
        (row,) = led.list_sessions(app=APP)["sessions"]
        types = [e["type"] for e in led.show_session(row["session_id"])["events"]]
        assert types == [
            "created", ITEMS_EVENT, ITEMS_EVENT, POP_EVENT, POP_EVENT, CLEAR_EVENT, ITEMS_EVENT,
        ]


async def test_sessions_are_isolated_and_persist(db_path):
    a, b = LogbookSession("a", db_path), LogbookSession("b", db_path)
    await a.add_items([msg("user", "for a")])
    await b.add_items([msg("user", "for b")])
    assert [i["content"] for i in await a.get_items()] == ["for a"]
    a.close()
    b.close()
    again = LogbookSession("a", db_path)
    assert [i["content"] for i in await again.get_items()] == ["for a"]
    again.close()


async def test_concurrent_pops_take_distinct_items(db_path):
    s = LogbookSession("c", db_path)
    await s.add_items([msg("user", str(i)) for i in range(6)])
    popped = await asyncio.gather(*(s.pop_item() for _ in range(6)))
    assert sorted(p["content"] for p in popped) == [str(i) for i in range(6)]
    assert await s.get_items() == []
    s.close()


def test_is_an_agents_sdk_session(db_path):
    memory = pytest.importorskip("agents.memory")
    s = LogbookSession("p", db_path)
    assert isinstance(s, memory.Session)
    s.close()


class _Recording:
    """A Ledger that records the idempotency key of every event appended."""

    def __init__(self, led):
        self._led = led
        self.keys = []

    def __getattr__(self, name):
        return getattr(self._led, name)

    def append_event(self, *args, **kwargs):
        self.keys.append(kwargs.get("idempotency_key"))
        return self._led.append_event(*args, **kwargs)


async def _add_pop_clear(led):
    s = LogbookSession("k", ledger=led)
    await s.add_items([msg("user", "a"), msg("user", "b")])
    await s.add_items([msg("user", "a"), msg("user", "b")])
    assert (await s.pop_item())["content"] == "b"
    await s.clear_session()
    await s.add_items([msg("user", "c")])
    return [i["content"] for i in await s.get_items()]


async def test_writes_carry_a_key_of_their_own_on_a_server_only(db_path):
    # On a server a keyed write is one statement (docs/postgres.md); the same
    # items added twice are still two writes, each with its own key.
    with lb.Ledger(db_path) as led:
        rec = _Recording(led)
        assert await _add_pop_clear(rec) == ["c"]
        assert rec.keys == [None] * 5
    if skip_reason() is not None:
        pytest.skip(skip_reason())
    with fresh_database() as url:
        with lb.Ledger(url) as led:
            rec = _Recording(led)
            assert await _add_pop_clear(rec) == ["c"]
            assert len(rec.keys) == 5 and len(set(rec.keys)) == 5
            assert all(k.startswith("ag-") for k in rec.keys)
            (row,) = led.list_sessions(app=APP)["sessions"]
            types = [e["type"] for e in led.show_session(row["session_id"])["events"]]
            assert types == [
                "created", ITEMS_EVENT, ITEMS_EVENT, POP_EVENT, CLEAR_EVENT, ITEMS_EVENT,
            ]


async def test_concurrent_pops_take_distinct_items_on_a_server():
    if skip_reason() is not None:
        pytest.skip(skip_reason())
    with fresh_database() as url:
        s = LogbookSession("c", url)
        await s.add_items([msg("user", str(i)) for i in range(6)])
        popped = await asyncio.gather(*(s.pop_item() for _ in range(6)))
        assert sorted(p["content"] for p in popped) == [str(i) for i in range(6)]
        assert await s.get_items() == []
        s.close()
