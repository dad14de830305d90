"""The Python examples of docs/python.md and README.md's "From Python" run
as written (each in a fresh folder, with LOGBOOK_DB there)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def blocks(doc: str) -> list[str]:
    text = (ROOT / doc).read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, re.S)


EXAMPLES = [(doc, i, b) for doc in ("docs/python.md", "README.md", "python/README.md") for i, b in enumerate(blocks(doc))]


@pytest.mark.parametrize("doc,i,code", EXAMPLES, ids=[f"{d}#{i}" for d, i, _ in EXAMPLES])
def test_example_runs(doc, i, code, tmp_path, monkeypatch, capsys):
    if "langgraph" in code:
        pytest.importorskip("langgraph.graph")
    if "logbook_ledger.agents" in code:
        pytest.importorskip("agents.memory")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LOGBOOK_DB", os.path.join(tmp_path, "default.db"))
    exec(compile(code, f"{doc} python block {i}", "exec"), {"__name__": "__example__"})


def test_there_are_examples():
    assert len(EXAMPLES) >= 4
