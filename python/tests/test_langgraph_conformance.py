"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) on
LogbookSaver and AsyncLogbookSaver: every base capability and every extended
one (delete_for_runs, copy_thread, prune) must pass. The suite's report is
printed to the terminal, past pytest's capture, so `.ci/python` shows it."""

from __future__ import annotations

import os
import tempfile

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from conformance import check_conformance  # noqa: E402
from langgraph.checkpoint.conformance import checkpointer_test  # noqa: E402

from logbook_ledger.langgraph import AsyncLogbookSaver, LogbookSaver  # noqa: E402


@checkpointer_test(name="LogbookSaver (SQLite)")
async def sqlite_saver():
    with tempfile.TemporaryDirectory() as d:
        with LogbookSaver.from_conn_string(os.path.join(d, "ledger.db")) as saver:
            yield saver


@checkpointer_test(name="AsyncLogbookSaver (SQLite)")
async def sqlite_async_saver():
    with tempfile.TemporaryDirectory() as d:
        async with AsyncLogbookSaver.from_conn_string(os.path.join(d, "ledger.db")) as saver:
            yield saver


@pytest.mark.parametrize("factory", [sqlite_saver, sqlite_async_saver], ids=["sync", "async"])
async def test_conformance_all_capabilities(factory, capsys):
    await check_conformance(factory, capsys)
