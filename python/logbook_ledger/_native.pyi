"""Type stubs of logbook_ledger._native (python/src/lib.rs; docs/python.md)."""

from os import PathLike
from types import TracebackType
from typing import Any, Mapping, Optional, Sequence, Union

from ._written import Written

_Json = Mapping[str, Any]
_Strs = Union[str, Sequence[str]]
_Time = Union[int, str]

#: The code table (docs/errors.md): wire string -> (exit code, retryable, description).
ERROR_CODES: dict[str, tuple[int, bool, str]]

class LogbookError(Exception):
    """A logbook error with its stable code."""

    code: str
    message: str
    retryable: bool
    details: dict[str, Any]

class InvalidArgument(LogbookError): ...
class SessionNotFound(LogbookError): ...
class RunNotFound(LogbookError): ...
class SessionConflict(LogbookError): ...
class LeaseHeld(LogbookError): ...
class StoreBusy(LogbookError): ...
class SessionInvalidTransition(LogbookError): ...
class RunInvalidTransition(LogbookError): ...
class StoreCorrupt(LogbookError): ...
class StoreVersionTooNew(LogbookError): ...
class StoreIo(LogbookError): ...
class LedgerTampered(LogbookError): ...
class GateNotFound(LogbookError): ...
class GateAlreadyDecided(LogbookError): ...
class GatePending(LogbookError): ...
class CheckpointNotFound(LogbookError): ...
class LeaseNotFound(LogbookError): ...
class Internal(LogbookError): ...
class Interrupted(LogbookError): ...
class StoreUnavailable(LogbookError): ...

class Ledger:
    """A handle on one logbook database; see docs/python.md."""

    def __init__(
        self,
        db: Union[str, PathLike[str], None] = None,
        *,
        busy_timeout_ms: Optional[int] = None,
        read_only: bool = False,
    ) -> None: ...
    @property
    def path(self) -> str: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Ledger": ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    def create_session(
        self,
        title: str,
        *,
        app: Optional[str] = None,
        goal: Optional[str] = None,
        agent: Optional[str] = None,
        parent: Optional[str] = None,
        route: Optional[str] = None,
        stage: Optional[str] = None,
        tag: Optional[_Strs] = None,
        context: Optional[_Json] = None,
        metadata: Optional[_Json] = None,
        pending: bool = False,
        idempotency_key: Optional[str] = None,
        checkpoint: Optional[_Json] = None,
    ) -> Written: ...
    def start(
        self,
        id: str,
        *,
        reason: Optional[str] = None,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def pause(
        self,
        id: str,
        *,
        reason: Optional[str] = None,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def resume(
        self,
        id: str,
        *,
        reason: Optional[str] = None,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def checkpoint(
        self,
        id: str,
        *,
        step: Optional[str] = None,
        note: Optional[str] = None,
        plan: Optional[_Strs] = None,
        operation: Optional[_Strs] = None,
        deployment: Optional[_Strs] = None,
        state: Optional[_Json] = None,
        payload: Optional[Union[bytes, bytearray]] = None,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def complete(
        self,
        id: str,
        *,
        result: str,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def fail(
        self,
        id: str,
        *,
        reason: str,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def cancel(
        self,
        id: str,
        *,
        reason: str,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def append_event(
        self,
        id: str,
        *,
        type: str,
        detail: Optional[str] = None,
        data: Optional[_Json] = None,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def show_session(self, id: str) -> dict[str, Any]: ...
    def list_sessions(
        self,
        *,
        status: Optional[_Strs] = None,
        app: Optional[str] = None,
        agent: Optional[str] = None,
        tag: Optional[str] = None,
        parent: Optional[str] = None,
        since: Optional[_Time] = None,
        until: Optional[_Time] = None,
        order: str = "created",
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> dict[str, Any]: ...
    def session_events(
        self, id: str, *, after_seq: Optional[int] = None, limit: Optional[int] = None
    ) -> dict[str, Any]: ...
    def feed(
        self,
        *,
        after: Optional[str] = None,
        session: Optional[_Strs] = None,
        type: Optional[_Strs] = None,
        limit: Optional[int] = None,
        from_now: bool = False,
    ) -> dict[str, Any]: ...
    def verify(self, ids: Optional[_Strs] = None) -> dict[str, Any]: ...
    def checkpoints(self, id: str) -> dict[str, Any]: ...
    def snapshot(self, id: str, *, checkpoint: Optional[int] = None) -> dict[str, Any]: ...
    def restore(
        self,
        id: str,
        *,
        checkpoint: int,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def fork(
        self,
        id: str,
        *,
        checkpoint: Optional[int] = None,
        title: Optional[str] = None,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def purge(
        self,
        *,
        ended_before: Optional[_Time] = None,
        app: Optional[str] = None,
        status: Optional[_Strs] = None,
        keep_last: Optional[int] = None,
        session: Optional[_Strs] = None,
        export: Union[str, PathLike[str], None] = None,
        dry_run: bool = False,
    ) -> dict[str, Any]: ...
    def usage(
        self,
        id: str,
        *,
        input_tokens: Optional[int] = None,
        output_tokens: Optional[int] = None,
        api_calls: Optional[int] = None,
        duration_ms: Optional[int] = None,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def budget(
        self,
        id: str,
        *,
        max_tokens: Optional[int] = None,
        max_api_calls: Optional[int] = None,
        max_duration_ms: Optional[int] = None,
        on_exceed: Optional[str] = None,
        reset: bool = False,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> dict[str, Any]: ...
    def open_gate(
        self,
        id: str,
        *,
        gate: str,
        kind: str,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def approve_gate(
        self,
        id: str,
        *,
        gate: str,
        note: Optional[str] = None,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def reject_gate(
        self,
        id: str,
        *,
        gate: str,
        reason: str,
        abort: bool = False,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def gates(self, id: str) -> dict[str, Any]: ...
    def lock(
        self,
        id: str,
        *,
        ttl_ms: Optional[int] = None,
        owner_pid: Optional[int] = None,
        if_rev: Optional[int] = None,
        lease: Optional[str] = None,
    ) -> dict[str, Any]: ...
    def unlock(
        self,
        id: str,
        *,
        lease: str,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> Written: ...
    def create_run(
        self,
        session: str,
        *,
        input: Optional[_Json] = None,
        metadata: Optional[_Json] = None,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def start_run(
        self,
        run: str,
        *,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def run_usage(
        self,
        run: str,
        *,
        input_tokens: Optional[int] = None,
        output_tokens: Optional[int] = None,
        api_calls: Optional[int] = None,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def run_turn(
        self,
        run: str,
        *,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def complete_run(
        self,
        run: str,
        *,
        output: Optional[_Json] = None,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def fail_run(
        self,
        run: str,
        *,
        code: str,
        message: str,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def cancel_run(
        self,
        run: str,
        *,
        if_rev: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        lease: Optional[str] = None,
    ) -> Written: ...
    def get_run(self, run: str) -> dict[str, Any]: ...
    def list_runs(self, session: str, *, status: Optional[_Strs] = None) -> list[dict[str, Any]]: ...
