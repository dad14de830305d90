"""Fixtures: a fresh ledger per test, in a temporary folder (never the
user's default database)."""

from __future__ import annotations

import os

import pytest

import logbook_ledger


@pytest.fixture(autouse=True)
def _no_default_db(monkeypatch, tmp_path):
    # A test that forgets `db` must not write to the user's ledger.
    monkeypatch.setenv("LOGBOOK_DB", str(tmp_path / "default.db"))
    for name in ("LOGBOOK_BUSY_TIMEOUT_MS", "LOGBOOK_SYNC"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def db_path(tmp_path):
    return os.path.join(tmp_path, "ledger.db")


@pytest.fixture
def ledger(db_path):
    with logbook_ledger.Ledger(db_path) as led:
        yield led
