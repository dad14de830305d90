"""A real LangGraph graph on LogbookSaver (docs/python.md, "LangGraph"): a
tool node and an interrupt, resumed in another OS process on the same
ledger, then time travel from an older checkpoint; and prune's keep_latest
on a graph with a DeltaChannel. On SQLite, and on PostgreSQL when
LOGBOOK_TEST_PG is set."""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys
from contextlib import contextmanager
from typing import Annotated

import pytest

pytest.importorskip("langgraph.graph")
pytest.importorskip("langgraph.prebuilt")

from langchain_core.messages import AIMessage  # noqa: E402
from langgraph.channels import DeltaChannel  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Command  # noqa: E402
from lg_graph import build, summary  # noqa: E402
from pg import fresh_database, skip_reason  # noqa: E402
from typing_extensions import TypedDict  # noqa: E402

import logbook_ledger as lb  # noqa: E402
from logbook_ledger.langgraph import APP, LogbookSaver, _hex, _ns_key  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = [
    "sqlite",
    pytest.param(
        "postgres",
        marks=pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or ""),
    ),
]


@contextmanager
def database(backend, tmp_path):
    if backend == "sqlite":
        yield str(tmp_path / "graph.db")
    else:
        with fresh_database() as url:
            yield url


def resume_elsewhere(db: str, thread_id: str, answer: str) -> dict:
    """Resumes the thread in a new Python process (lg_graph.py's main)."""
    env = dict(os.environ, LG_TEST_DB=db, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [sys.executable, os.path.join(HERE, "lg_graph.py"), thread_id, answer],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


PLANNED = [
    ["human", "what is 2 + 3?", []],
    ["ai", "", [{"a": 2, "b": 3}]],
    ["tool", "5", []],
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_interrupt_resume_in_another_process_then_time_travel(backend, tmp_path):
    thread = "graph-1"
    config = {"configurable": {"thread_id": thread}}
    with database(backend, tmp_path) as db, LogbookSaver.from_conn_string(db) as saver:
        graph = build(saver)
        out = graph.invoke({"messages": [("user", "what is 2 + 3?")]}, config)
        (intr,) = out["__interrupt__"]
        assert intr.value == {"question": "keep the sum?", "sum": "5"}
        assert graph.get_state(config).next == ("review",)

        # Another OS process, the same ledger: it rebuilds the graph and
        # resumes the interrupted thread.
        child = resume_elsewhere(db, thread, "yes")
        assert child["pid"] != os.getpid()
        final = PLANNED + [["ai", "sum 5, approved: yes", []]]
        assert child["messages"] == final
        state = graph.get_state(config)
        assert state.next == ()
        assert summary(state.values["messages"]) == final

        # Time travel: back to the checkpoint before the tool ran, change the
        # planned call, and run the branch from there.
        history = list(graph.get_state_history(config))
        (before_tools,) = [s for s in history if s.next == ("tools",)]
        assert summary(before_tools.values["messages"]) == PLANNED[:2]
        branch = graph.update_state(
            before_tools.config,
            {
                "messages": [
                    AIMessage(
                        id="plan-1",
                        content="",
                        tool_calls=[{"name": "add", "args": {"a": 10, "b": 3}, "id": "call-1"}],
                    )
                ]
            },
        )
        out = graph.invoke(None, branch)
        assert out["__interrupt__"][0].value == {"question": "keep the sum?", "sum": "13"}
        out = graph.invoke(Command(resume="no"), config)
        branched = [
            ["human", "what is 2 + 3?", []],
            ["ai", "", [{"a": 10, "b": 3}]],
            ["tool", "13", []],
            ["ai", "sum 13, approved: no", []],
        ]
        assert summary(out["messages"]) == branched
        assert summary(graph.get_state(config).values["messages"]) == branched

        # The branch forks from the older checkpoint; the first run's final
        # state is still in the thread's history.
        fork_cid = branch["configurable"]["checkpoint_id"]
        forked = saver.get_tuple(branch)
        assert forked.parent_config["configurable"]["checkpoint_id"] == (
            before_tools.config["configurable"]["checkpoint_id"]
        )
        history = list(graph.get_state_history(config))
        assert summary(history[0].values["messages"]) == branched
        assert final in [summary(s.values.get("messages", [])) for s in history]

        # In the ledger: one session of app langgraph, one logbook checkpoint
        # per LangGraph checkpoint (steps naming them), its events verified.
        with lb.Ledger(db) as led:
            # One session: the parallel put_writes of the first step did not
            # each make one.
            (s,) = led.list_sessions(app=APP)["sessions"]
            sid = s["session_id"]
            shown = led.show_session(sid)
            assert shown["session"]["status"] == "active"
            steps = [c["step"] for c in led.checkpoints(sid)["checkpoints"]]
            assert len(steps) == len(history) == len(list(saver.list(config)))
            assert f"langgraph {_ns_key('')} {_hex(fork_cid)}" in steps
            cps = [e for e in shown["events"] if e["type"] == "checkpoint"]
            assert len(cps) == len(steps)
            assert shown["session"]["rev"] >= len(steps)
            assert led.verify([sid])["sessions"] == 1


def append(state: list, writes: list) -> list:
    return state + [x for batch in writes for x in batch]


class Counting(TypedDict):
    items: Annotated[list, DeltaChannel(append, snapshot_frequency=3)]
    total: Annotated[int, operator.add]


def counter(saver):
    def step(state: Counting):
        return {"items": [len(state["items"])], "total": 1}

    g = StateGraph(Counting)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["total"] < 7 else END)
    return g.compile(checkpointer=saver)


@pytest.mark.parametrize("backend", BACKENDS)
def test_prune_keep_latest_keeps_what_a_delta_channel_needs(backend, tmp_path):
    config = {"configurable": {"thread_id": "delta"}}
    with database(backend, tmp_path) as db, LogbookSaver.from_conn_string(db) as saver:
        graph = counter(saver)
        graph.invoke({"items": [], "total": 0}, config)
        full = graph.get_state(config).values
        assert full == {"items": list(range(7)), "total": 7}
        before = len(list(saver.list(config)))
        (old,) = saver.ledger.list_sessions(app=APP)["sessions"]

        saver.prune(["delta"], strategy="keep_latest")
        # The newest checkpoint does not hold the delta channel's value: its
        # ancestors back to the last snapshot stay, the older ones go.
        after = len(list(saver.list(config)))
        assert 1 < after < before
        assert graph.get_state(config).values == full
        with LogbookSaver.from_conn_string(db) as other:
            assert counter(other).get_state(config).values == full

        # The old session is purged (its tombstone names the purge); the new
        # one says which it supersedes.
        (new,) = saver.ledger.list_sessions(app=APP)["sessions"]
        assert new["metadata"]["langgraph"]["supersedes"] == old["session_id"]
        with pytest.raises(lb.SessionNotFound) as ei:
            saver.ledger.show_session(old["session_id"])
        assert "purge_id" in ei.value.details

        # The graph goes on from the kept checkpoint: three more steps.
        graph.invoke({"items": [], "total": -3}, config)
        assert graph.get_state(config).values == {"items": list(range(10)), "total": 7}
