"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) on
LogbookSaver and AsyncLogbookSaver: every base capability must pass."""

from __future__ import annotations

import os
import tempfile

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.report import ProgressCallbacks  # noqa: E402

from logbook_ledger.langgraph import AsyncLogbookSaver, LogbookSaver  # noqa: E402

BASE = {"put", "put_writes", "get_tuple", "list", "delete_thread"}


@checkpointer_test(name="LogbookSaver")
async def sqlite_saver():
    with tempfile.TemporaryDirectory() as d:
        with LogbookSaver.from_conn_string(os.path.join(d, "ledger.db")) as saver:
            yield saver


@checkpointer_test(name="AsyncLogbookSaver")
async def sqlite_async_saver():
    with tempfile.TemporaryDirectory() as d:
        async with AsyncLogbookSaver.from_conn_string(os.path.join(d, "ledger.db")) as saver:
            yield saver


@pytest.mark.parametrize("factory", [sqlite_saver, sqlite_async_saver], ids=["sync", "async"])
async def test_conformance_base_capabilities(factory):
    report = await validate(factory, progress=ProgressCallbacks.verbose())
    report.print_report()
    assert report.passed_all_base()
    ran = {name for name, result in report.results.items() if result.passed}
    assert BASE <= ran
