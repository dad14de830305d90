"""logbook from Python: the ledger of AI-agent work sessions (docs/design.md, "From Python").

``Ledger`` is a handle on one logbook database — a SQLite file or a
PostgreSQL server — whose methods are the library's verbs, with keyword
arguments named like the CLI's flags and results as the CLI's ``--json``
``data`` (dicts). Errors are ``LogbookError`` subclasses carrying the
stable code (docs/errors.md): one class per code, named after it
(``SESSION_CONFLICT`` -> ``SessionConflict``). See docs/python.md.
"""

from __future__ import annotations

from ._native import (
    ERROR_CODES,
    CheckpointNotFound,
    GateAlreadyDecided,
    GateNotFound,
    GatePending,
    Internal,
    Interrupted,
    InvalidArgument,
    LeaseHeld,
    LeaseNotFound,
    Ledger,
    LedgerTampered,
    LogbookError,
    RunInvalidTransition,
    RunNotFound,
    SessionConflict,
    SessionInvalidTransition,
    SessionNotFound,
    StoreBusy,
    StoreCorrupt,
    StoreIo,
    StoreUnavailable,
    StoreVersionTooNew,
)
from ._written import Written

__all__ = [
    "ERROR_CODES",
    "CheckpointNotFound",
    "GateAlreadyDecided",
    "GateNotFound",
    "GatePending",
    "Internal",
    "Interrupted",
    "InvalidArgument",
    "LeaseHeld",
    "LeaseNotFound",
    "Ledger",
    "LedgerTampered",
    "LogbookError",
    "RunInvalidTransition",
    "RunNotFound",
    "SessionConflict",
    "SessionInvalidTransition",
    "SessionNotFound",
    "StoreBusy",
    "StoreCorrupt",
    "StoreIo",
    "StoreUnavailable",
    "StoreVersionTooNew",
    "Written",
]
