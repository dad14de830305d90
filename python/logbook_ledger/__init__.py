"""logbook from Python: the ledger of AI-agent work sessions (SPEC §9).

``Ledger`` is a handle on one logbook database — a SQLite file or a
PostgreSQL server — whose methods are the library's verbs, with keyword
arguments named like the CLI's flags and results as the CLI's ``--json``
``data`` (dicts). Errors are ``LogbookError`` subclasses carrying the
stable code (docs/errors.md). See docs/python.md.
"""

from __future__ import annotations

from . import _native
from ._native import ERROR_CODES, Ledger, LogbookError
from ._written import Written

__all__ = ["ERROR_CODES", "Ledger", "LogbookError", "Written"]


def _export_error_classes() -> None:
    # One subclass of LogbookError per stable code, made from the library's
    # code table: SESSION_NOT_FOUND -> SessionNotFound, and so on.
    for wire in ERROR_CODES:
        name = "".join(part.capitalize() for part in wire.split("_"))
        globals()[name] = getattr(_native, name)
        __all__.append(name)


_export_error_classes()
del _export_error_classes
