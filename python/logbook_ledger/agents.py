"""An OpenAI Agents SDK ``Session`` on logbook (docs/python.md,
"OpenAI Agents SDK").

An Agents SDK session is a logbook session of app ``openai-agents``; each
``add_items`` call is one ``x.agents.items`` event holding its items, and
``pop_item`` and ``clear_session`` are recorded as events too
(``x.agents.pop``, ``x.agents.clear``): the history is what the timeline
leaves, and no row is ever deleted. The ledger redacts secrets in the items
as in any JSON it stores (docs/design.md, "Redaction").
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import uuid
from typing import Any, Optional

from . import Ledger, SessionConflict

#: The app of every session this adapter creates.
APP = "openai-agents"
ITEMS_EVENT = "x.agents.items"
POP_EVENT = "x.agents.pop"
CLEAR_EVENT = "x.agents.clear"
_TAG = "agents.session."
_LIVE = ["pending", "active", "paused"]


def _tag(session_id: str) -> str:
    return _TAG + hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:40]


class LogbookSession:
    """An Agents SDK ``Session`` (``agents.memory.Session``) recorded in a
    logbook ledger.

    ``db`` is resolved as ``logbook_ledger.Ledger`` resolves it; or pass an
    open ``ledger``. ``session_settings`` is the SDK's ``SessionSettings``
    (its ``limit`` is ``get_items``' default).
    """

    def __init__(
        self,
        session_id: str,
        db: Optional[str] = None,
        *,
        ledger: Optional[Ledger] = None,
        session_settings: Any = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self.ledger = ledger if ledger is not None else Ledger(db)
        self._own_ledger = ledger is None
        # On a server, a write with an idempotency key is one statement (one
        # round trip, docs/postgres.md, "One round trip per write"), and a
        # reply lost on the way back is resolved by the key; each write gets
        # a key of its own. On SQLite a key is one more row and buys nothing.
        self._keyed = self.ledger.path.startswith(("postgres://", "postgresql://"))
        self._sid: Optional[str] = None
        self._lock = threading.Lock()

    # -- the logbook session ---------------------------------------------------

    def _key(self) -> Optional[str]:
        """A new idempotency key for one write, on a server only. Never
        derived from the items: the same items added twice are two writes."""
        return "ag-" + uuid.uuid4().hex if self._keyed else None

    def _find(self) -> Optional[str]:
        with self._lock:
            if self._sid is not None:
                return self._sid
        page = self.ledger.list_sessions(app=APP, tag=_tag(self.session_id), status=_LIVE, limit=1)
        if not page["sessions"]:
            return None
        sid = page["sessions"][0]["session_id"]
        with self._lock:
            self._sid = sid
        return sid

    def _session(self) -> str:
        sid = self._find()
        if sid is not None:
            return sid
        s = self.ledger.create_session(
            "Agents SDK session",
            app=APP,
            tag=[_tag(self.session_id)],
            metadata={"openai_agents": {"session_id": self.session_id}},
        )
        with self._lock:
            self._sid = s["session_id"]
        return s["session_id"]

    def _fold(self, sid: str) -> tuple[list[tuple[int, int, Any]], int]:
        """The items the timeline leaves, as (seq, index, item), and the
        session's rev they were read at."""
        # One read: the session's rev and all its events in one snapshot.
        view = self.ledger.show_session(sid)
        items: list[tuple[int, int, Any]] = []
        for e in view["events"]:
            d = e.get("data") or {}
            if e["type"] == ITEMS_EVENT:
                items.extend((e["seq"], i, item) for i, item in enumerate(d.get("items", [])))
            elif e["type"] == POP_EVENT:
                key = (d.get("seq"), d.get("index"))
                items = [x for x in items if (x[0], x[1]) != key]
            elif e["type"] == CLEAR_EVENT:
                items = []
        rev = view["session"]["rev"]
        return items, rev

    # -- blocking versions -----------------------------------------------------

    def get_items_sync(self, limit: Optional[int] = None) -> list[Any]:
        """The history, oldest first; the newest ``limit`` items with one."""
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        sid = self._find()
        if sid is None:
            return []
        items = [x[2] for x in self._fold(sid)[0]]
        if limit is None:
            return items
        return items[-limit:] if limit > 0 else []

    def add_items_sync(self, items: list[Any]) -> None:
        """Appends ``items`` as one ``x.agents.items`` event."""
        if not items:
            return
        sid = self._session()
        self.ledger.append_event(
            sid, type=ITEMS_EVENT, data={"items": list(items)}, idempotency_key=self._key()
        )

    def pop_item_sync(self) -> Optional[Any]:
        """Records the newest item's removal (``x.agents.pop``) and returns it;
        None when the history is empty. Guarded by the session's rev, so two
        concurrent pops never take the same item."""
        sid = self._find()
        if sid is None:
            return None
        while True:
            items, rev = self._fold(sid)
            if not items:
                return None
            seq, index, item = items[-1]
            try:
                self.ledger.append_event(
                    sid,
                    type=POP_EVENT,
                    data={"seq": seq, "index": index},
                    if_rev=rev,
                    idempotency_key=self._key(),
                )
                return item
            except SessionConflict:
                continue

    def clear_session_sync(self) -> None:
        """Records that the history was cleared (``x.agents.clear``)."""
        sid = self._find()
        if sid is not None:
            self.ledger.append_event(sid, type=CLEAR_EVENT, idempotency_key=self._key())

    # -- the Session protocol --------------------------------------------------

    async def get_items(self, limit: Optional[int] = None) -> list[Any]:
        """``get_items_sync`` in a thread."""
        return await asyncio.to_thread(self.get_items_sync, limit)

    async def add_items(self, items: list[Any]) -> None:
        """``add_items_sync`` in a thread."""
        await asyncio.to_thread(self.add_items_sync, items)

    async def pop_item(self) -> Optional[Any]:
        """``pop_item_sync`` in a thread."""
        return await asyncio.to_thread(self.pop_item_sync)

    async def clear_session(self) -> None:
        """``clear_session_sync`` in a thread."""
        await asyncio.to_thread(self.clear_session_sync)

    def close(self) -> None:
        """Closes the ledger if this session opened it."""
        if self._own_ledger:
            self.ledger.close()


__all__ = ["APP", "CLEAR_EVENT", "ITEMS_EVENT", "POP_EVENT", "LogbookSession"]
