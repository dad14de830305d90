"""A fresh PostgreSQL database per test on the throwaway server of .ci/pg
(LOGBOOK_TEST_PG), as the Rust suite's tests/it/pg.rs makes them: created
with psql from LOGBOOK_TEST_PG_BIN, dropped afterwards. The password goes to
psql in its environment, never on its command line."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from contextlib import contextmanager
from typing import Iterator, Optional
from urllib.parse import unquote, urlsplit, urlunsplit

ADMIN_URL = os.environ.get("LOGBOOK_TEST_PG")


def _psql(sql: str) -> None:
    assert ADMIN_URL
    u = urlsplit(ADMIN_URL)
    env = dict(os.environ)
    env.update(
        PGHOST=u.hostname or "127.0.0.1",
        PGPORT=str(u.port or 5432),
        PGUSER=unquote(u.username or ""),
        PGPASSWORD=unquote(u.password or ""),
        PGDATABASE=u.path.lstrip("/") or "postgres",
    )
    bindir = os.environ.get("LOGBOOK_TEST_PG_BIN")
    psql = os.path.join(bindir, "psql") if bindir else shutil.which("psql")
    assert psql, "psql not found (LOGBOOK_TEST_PG_BIN)"
    subprocess.run(
        [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


@contextmanager
def fresh_database() -> Iterator[str]:
    """The URL of a new, empty database; dropped when the block ends."""
    assert ADMIN_URL
    # The name is ours (fixed prefix, hex): nothing to quote.
    name = "logbook_py_" + secrets.token_hex(8)
    _psql(f"CREATE DATABASE {name} ENCODING 'UTF8' TEMPLATE template0")
    u = urlsplit(ADMIN_URL)
    try:
        yield urlunsplit((u.scheme, u.netloc, "/" + name, u.query, u.fragment))
    finally:
        _psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def skip_reason() -> Optional[str]:
    return None if ADMIN_URL else "LOGBOOK_TEST_PG is not set (.ci/pg starts a server)"
