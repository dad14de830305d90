"""LangGraph checkpoint savers on logbook (docs/python.md, "LangGraph").

A LangGraph thread is a logbook session of app ``langgraph``; each
LangGraph checkpoint is a logbook checkpoint whose snapshot payload holds the
serializer's bytes as they are (see docs/python.md for the shape), and
each ``put_writes`` call is one ``x.langgraph.writes`` event of that
session. ``delete_thread`` cancels the thread's session and purges it: the
session's rows go, a tombstone and the purge record stay (README,
"Retention"). ``copy_thread`` replays a thread into a child session of its
own; ``prune`` and ``delete_for_runs`` supersede a thread's session by a
fresh one holding what is kept, then cancel and purge the old one
(docs/python.md).

``LogbookSaver`` has the synchronous methods and their ``a*`` twins (which
run the blocking call in a thread, as LangGraph's own SQLite saver does);
``AsyncLogbookSaver`` is the same saver with an async ``from_conn_string``.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import random
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Optional

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from . import Ledger, SessionInvalidTransition, SessionNotFound

#: The app of every session this saver creates.
APP = "langgraph"
#: The type of the event each ``put_writes`` appends.
WRITES_EVENT = "x.langgraph.writes"
#: The state's format version (docs/python.md): 2 keeps the serializer's
#: bytes in the snapshot's payload; 1 (before schema V11) kept them as hex
#: in the state, and still reads back.
STATE_VERSION = 2
_TAG = "langgraph.thread."
_STEP = "langgraph "
_FIND_STATUSES = ["pending", "active", "paused", "completed", "failed"]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _hex(text: str) -> str:
    # Hex keeps the text exact through logbook's redaction (docs/design.md, "Redaction"), which
    # no lowercase hex string matches, and keeps its byte order.
    return text.encode("utf-8").hex()


def _unhex(text: str) -> str:
    return bytes.fromhex(text).decode("utf-8")


def _blobs(snap: dict) -> tuple[dict, str, bytes, str, bytes]:
    """(state, checkpoint type, its bytes, metadata type, its bytes) of a
    snapshot this saver wrote: the bytes are the payload's, one after the
    other (state v2), or hex in the state (v1)."""
    state = snap["state"]
    cp, md = state["checkpoint"], state["metadata"]
    if "hex" in cp:
        return state, cp["type"], bytes.fromhex(cp["hex"]), md["type"], bytes.fromhex(md["hex"])
    payload = snap["payload"] or b""
    n = cp["bytes"]
    if n + md["bytes"] != len(payload):
        raise ValueError("a LangGraph checkpoint's payload does not hold the sizes its state gives")
    return state, cp["type"], payload[:n], md["type"], payload[n:]


def _thread_tag(thread_id: str) -> str:
    return _TAG + _sha(thread_id)[:40]


def _ns_key(checkpoint_ns: str) -> str:
    return _sha(checkpoint_ns)[:16]


def _writes_sort_key(task_path: str, task_id: str, idx: int) -> tuple:
    return (task_path, task_id, idx)


#: The bounds of a saver's cache of read states and folded writes.
_ROWS_MAX = 1024
_ROWS_BYTES = 32 << 20


class _Fold:
    """What a saver has read of one session's events, kept between calls:
    the events are append-only (a purge removes the whole session), so each
    read fetches only the events after ``upto`` (BENCHMARKS.md, "Python
    package")."""

    __slots__ = ("upto", "seqs", "ids", "writes")

    def __init__(self) -> None:
        #: The seq of the last event folded in (-1: none yet).
        self.upto = -1
        #: (ns key, checkpoint id) -> the newest seq of its checkpoint, in
        #: the order the ids first appeared.
        self.seqs: dict[tuple[str, str], int] = {}
        #: ns key -> its checkpoint ids, sorted.
        self.ids: dict[str, list[str]] = {}
        #: (ns hex, checkpoint id hex) -> the seqs of its writes events.
        self.writes: dict[tuple[Any, Any], list[int]] = {}

    def add(self, events: list) -> None:
        for e in events:
            self._add(e)
            self.upto = e["seq"]

    def _add(self, e: dict) -> None:
        seq = e["seq"]
        d = e.get("data")
        if e["type"] == "checkpoint":
            # A checkpoint with a snapshot (its data names the snapshot's
            # hash), as `Ledger.checkpoints` lists them.
            if not d or "snapshot" not in d:
                return
            step = d.get("step") or ""
            if not step.startswith(_STEP):
                return
            parts = step[len(_STEP):].split(" ")
            if len(parts) != 2:
                return
            key = (parts[0], _unhex(parts[1]))
            if key not in self.seqs:
                bisect.insort(self.ids.setdefault(key[0], []), key[1])
            self.seqs[key] = max(self.seqs.get(key, -1), seq)
        elif e["type"] == WRITES_EVENT and d:
            self.writes.setdefault((d.get("ns"), d.get("checkpoint_id")), []).append(seq)


class LogbookSaver(BaseCheckpointSaver[str]):
    """A LangGraph ``BaseCheckpointSaver`` that records into a logbook ledger.

    ``db`` is resolved as ``logbook_ledger.Ledger`` resolves it (a SQLite
    file's path, a ``postgres://`` URL, or the default database); or pass an
    open ``ledger``. Safe to share between threads.
    """

    ledger: Ledger

    def __init__(
        self,
        db: Optional[str] = None,
        *,
        ledger: Optional[Ledger] = None,
        serde: Optional[SerializerProtocol] = None,
    ) -> None:
        super().__init__(serde=serde)
        self.ledger = ledger if ledger is not None else Ledger(db)
        # On a server, a write with an idempotency key is one statement (one
        # round trip, docs/postgres.md); each write gets a key of its own.
        # On SQLite a key is one more row per write and buys nothing.
        self._keyed = self.ledger.path.startswith(("postgres://", "postgresql://"))
        self._sessions: dict[str, str] = {}
        self._lock = threading.Lock()
        self._create_lock = threading.Lock()
        # Session id -> what was read of its events (_Fold); the lock is
        # held while a fold catches up, one reader at a time.
        self._folds: dict[str, _Fold] = {}
        self._fold_lock = threading.RLock()
        # (session id, seq) -> a checkpoint's decoded state, and (session
        # id, key) -> a checkpoint's folded writes, as read (the ledger's
        # events and snapshots are never updated; a purge removes the
        # session, which the fold's read reports); newest used last, at most
        # _ROWS_MAX entries and _ROWS_BYTES of serialized values.
        self._rows: OrderedDict[tuple[str, Any], tuple[int, Any]] = OrderedDict()
        self._rows_bytes = 0

    @classmethod
    @contextmanager
    def from_conn_string(cls, db: Optional[str] = None) -> Iterator["LogbookSaver"]:
        """A saver on ``db`` whose ledger is closed when the block ends."""
        saver = cls(db)
        try:
            yield saver
        finally:
            saver.ledger.close()

    # -- threads and sessions -------------------------------------------------

    def _find(self, thread_id: str) -> Optional[str]:
        """The session of a thread, or None (a purged one is gone)."""
        with self._lock:
            sid = self._sessions.get(thread_id)
        if sid is not None:
            return sid
        # The newest live session of app langgraph with the thread's tag.
        # Asked by the tag alone, which the ledger reads from its tag index;
        # with the app and statuses too it would walk every langgraph
        # session until one has the tag (BENCHMARKS.md, "Python package").
        sid, cursor = None, None
        while sid is None:
            page = self.ledger.list_sessions(tag=_thread_tag(thread_id), limit=8, cursor=cursor)
            for s in page["sessions"]:
                if s.get("app") == APP and s["status"] in _FIND_STATUSES:
                    sid = s["session_id"]
                    break
            cursor = page.get("next_cursor")
            if sid is None and not cursor:
                return None
        with self._lock:
            self._sessions[thread_id] = sid
        return sid

    def _forget(self, thread_id: str) -> None:
        with self._lock:
            self._sessions.pop(thread_id, None)

    def _session_for_write(self, thread_id: str) -> str:
        sid = self._find(thread_id)
        if sid is not None:
            return sid
        # LangGraph runs a step's put_writes calls in parallel threads: the
        # first writes of a new thread must not each create a session.
        with self._create_lock:
            sid = self._find(thread_id)
            if sid is not None:
                return sid
            sid = self._new_session(thread_id)
            with self._lock:
                self._sessions[thread_id] = sid
            return sid

    def _key(self) -> Optional[str]:
        """A new idempotency key for one write (on a server only): it lets
        the write be one statement, and a reply lost on the way back is
        resolved by it. Never derived from the content: the same content put
        again (put A, put B, put A) is a new write, as LangGraph's savers
        record it, not a replay of the first."""
        if not self._keyed:
            return None
        return "lg-" + uuid.uuid4().hex

    def _create_with(self, thread_id: str, checkpoint: dict) -> bool:
        """For a thread with no session yet: creates it with ``checkpoint``
        as its first, in one transaction (one commit, not two). False when
        the thread has a session: the caller records the checkpoint on it."""
        if self._find(thread_id) is not None:
            return False
        with self._create_lock:
            if self._find(thread_id) is not None:
                return False
            sid = self._new_session(thread_id, checkpoint=checkpoint)
            with self._lock:
                self._sessions[thread_id] = sid
            return True

    def _write(self, thread_id: str, fn) -> Any:
        """Runs ``fn(session_id)``; once more on the thread's current session
        when the cached one was purged meanwhile (another saver's
        delete_thread) or ended (superseded by a prune or delete_for_runs)."""
        sid = self._session_for_write(thread_id)
        try:
            return fn(sid)
        except (SessionNotFound, SessionInvalidTransition):
            self._forget(thread_id)
            return fn(self._session_for_write(thread_id))

    def _fold(self, sid: str) -> _Fold:
        """The session's fold, caught up with its newest events (one read
        when nothing is new). SessionNotFound when it was purged."""
        with self._fold_lock:
            fold = self._folds.get(sid)
            if fold is None:
                fold = _Fold()
            while True:
                try:
                    page = self.ledger.session_events(
                        sid, after_seq=fold.upto if fold.upto >= 0 else None, limit=1000
                    )
                except SessionNotFound:
                    self._folds.pop(sid, None)
                    for key in [k for k in self._rows if k[0] == sid]:
                        self._rows_bytes -= self._rows.pop(key)[0]
                    raise
                fold.add(page["events"])
                if page.get("next_after_seq") is None:
                    break
            self._folds[sid] = fold
            return fold

    def _index(self, sid: str) -> list[tuple[str, str, int]]:
        """(ns key, checkpoint id, seq) of each checkpoint of a session; for
        a checkpoint id put twice, the newest."""
        return [(k[0], k[1], seq) for k, seq in self._fold(sid).seqs.items()]

    def _writes(self, sid: str, checkpoint_ns: str, checkpoint_id: str) -> list:
        """The pending writes of one checkpoint, folded as LangGraph's own
        savers fold them: a special channel's write replaces, any other is
        kept once per (task, idx)."""
        ns_hex, cid_hex = _hex(checkpoint_ns), _hex(checkpoint_id)
        with self._fold_lock:
            fold = self._folds.get(sid)
            seqs = list(fold.writes.get((ns_hex, cid_hex), ())) if fold is not None else None
        if seqs == []:
            return []
        # A checkpoint's writes only grow (its list of seqs is appended to),
        # so its count and last seq name what was folded.
        key = ("writes", ns_hex, cid_hex, len(seqs), seqs[-1]) if seqs else None
        ordered = self._cached(sid, key) if key else None
        if ordered is None:
            ordered = self._fold_writes(sid, seqs, ns_hex, cid_hex)
            if key:
                self._cache(sid, key, ordered, sum(len(w[3]) for w in ordered))
        loads = self.serde.loads_typed
        return [(task_id, channel, loads((t, v))) for task_id, channel, t, v in ordered]

    def _fold_writes(
        self, sid: str, seqs: Optional[list[int]], ns_hex: str, cid_hex: str
    ) -> list[tuple[str, str, str, bytes]]:
        """(task id, channel, type, value bytes) of a checkpoint's writes
        events at ``seqs``, folded and in LangGraph's order."""
        stored: dict[tuple[str, int], tuple[str, str, str, str, str]] = {}
        for e in self._events_at(sid, seqs):
            d = e.get("data")
            if e["type"] != WRITES_EVENT or not d:
                continue
            if d.get("ns") != ns_hex or d.get("checkpoint_id") != cid_hex:
                continue
            task_id, task_path = _unhex(d["task_id"]), _unhex(d["task_path"])
            for w in d["writes"]:
                key = (task_id, w["idx"])
                if w["idx"] >= 0 and key in stored:
                    continue
                stored[key] = (task_id, _unhex(w["channel"]), w["type"], w["value"], task_path)
        ordered = sorted(stored.items(), key=lambda kv: _writes_sort_key(kv[1][4], *kv[0]))
        return [
            (task_id, channel, t, bytes.fromhex(v)) for _, (task_id, channel, t, v, _) in ordered
        ]

    def _events_at(self, sid: str, seqs: Optional[list[int]]) -> Iterator[dict]:
        """The session's events at ``seqs`` (ascending): cached ones from
        the cache, the others a read per run of consecutive seqs; every
        event when ``seqs`` is None."""
        if seqs is None:
            after = None
            while True:
                page = self.ledger.session_events(sid, after_seq=after, limit=1000)
                yield from page["events"]
                after = page.get("next_after_seq")
                if after is None:
                    return
        # Each event is read once per call: the folded writes are what the
        # cache keeps.
        i = 0
        while i < len(seqs):
            j = i + 1
            while j < len(seqs) and j - i < 1000 and seqs[j] == seqs[j - 1] + 1:
                j += 1
            page = self.ledger.session_events(sid, after_seq=seqs[i] - 1, limit=j - i)
            yield from page["events"]
            i = j

    def _cached(self, sid: str, key: Any) -> Any:
        with self._fold_lock:
            hit = self._rows.get((sid, key))
            if hit is None:
                return None
            self._rows.move_to_end((sid, key))
            return hit[1]

    def _cache(self, sid: str, key: Any, value: Any, size: int) -> None:
        with self._fold_lock:
            old = self._rows.pop((sid, key), None)
            if old is not None:
                self._rows_bytes -= old[0]
            self._rows[(sid, key)] = (size, value)
            self._rows_bytes += size
            while len(self._rows) > _ROWS_MAX or self._rows_bytes > _ROWS_BYTES:
                self._rows_bytes -= self._rows.popitem(last=False)[1][0]

    def _state(self, sid: str, seq: int) -> tuple:
        """(ns, checkpoint id, parent id, checkpoint type, bytes, metadata
        type, bytes) of the checkpoint at ``seq``, read once."""
        got = self._cached(sid, seq)
        if got is None:
            state, cp_type, cp_bytes, md_type, md_bytes = _blobs(
                self.ledger.snapshot(sid, checkpoint=seq)
            )
            got = (
                _unhex(state["checkpoint_ns"]),
                state["checkpoint_id"],
                state.get("parent_checkpoint_id"),
                cp_type,
                cp_bytes,
                md_type,
                md_bytes,
            )
            self._cache(sid, seq, got, len(got[4]) + len(got[6]))
        return got

    def _tuple(self, thread_id: str, sid: str, seq: int) -> CheckpointTuple:
        ns, cid, parent, cp_type, cp_bytes, md_type, md_bytes = self._state(sid, seq)
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": cid,
                }
            },
            checkpoint=self.serde.loads_typed((cp_type, cp_bytes)),
            metadata=self.serde.loads_typed((md_type, md_bytes)),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=self._writes(sid, ns, cid),
        )

    # -- BaseCheckpointSaver --------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        """The checkpoint ``config`` names, or the thread's newest in its
        namespace; None when there is none."""
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        ns = conf.get("checkpoint_ns", "")
        cid = get_checkpoint_id(config)
        sid = self._find(thread_id)
        if sid is None:
            return None
        key = _ns_key(ns)
        with self._fold_lock:
            try:
                fold = self._fold(sid)
            except SessionNotFound:
                # The cached session was purged (another saver's delete_thread):
                # the thread may have a new one.
                self._forget(thread_id)
                sid = self._find(thread_id)
                if sid is None:
                    return None
                fold = self._fold(sid)
            if not cid:
                ids = fold.ids.get(key)
                cid = ids[-1] if ids else None
            seq = fold.seqs.get((key, cid)) if cid else None
        if seq is None:
            return None
        return self._tuple(thread_id, sid, seq)

    def list(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id): of ``config``'s
        thread (and namespace, and checkpoint id, when given), or of every
        LangGraph thread; ``filter`` matches metadata keys, ``before`` keeps
        the checkpoints older than the one it names."""
        if config is not None:
            conf = config["configurable"]
            thread_id = conf.get("thread_id")
            threads = []
            if thread_id is not None:
                sid = self._find(thread_id)
                threads = [(thread_id, sid)] if sid is not None else []
            else:
                threads = list(self._threads())
            ns = conf.get("checkpoint_ns")
            cid = get_checkpoint_id(config)
        else:
            thread_id, threads, ns, cid = None, list(self._threads()), None, None
        before_id = get_checkpoint_id(before) if before else None
        if thread_id is not None and ns is not None:
            entries = self._entries_of(threads, ns, cid, before_id, None if filter else limit)
        else:
            entries = []
            for thread_id, sid in threads:
                try:
                    index = self._index(sid)
                except SessionNotFound:
                    continue
                for ns_key, checkpoint_id, seq in index:
                    if ns is not None and ns_key != _ns_key(ns):
                        continue
                    if cid and checkpoint_id != cid:
                        continue
                    if before_id and checkpoint_id >= before_id:
                        continue
                    entries.append((checkpoint_id, thread_id, sid, seq))
            entries.sort(key=lambda e: e[0], reverse=True)
        left = limit
        for _, thread_id, sid, seq in entries:
            if left is not None and left <= 0:
                break
            t = self._tuple(thread_id, sid, seq)
            if filter and not all(t.metadata.get(k) == v for k, v in filter.items()):
                continue
            if left is not None:
                left -= 1
            yield t

    def _entries_of(
        self,
        threads: list[tuple[str, str]],
        ns: str,
        cid: Optional[str],
        before_id: Optional[str],
        most: Optional[int],
    ) -> list[tuple[str, str, str, int]]:
        """``list``'s entries for one thread and namespace, newest id first,
        read from the fold's sorted ids (at most ``most`` of them) instead
        of sorting every checkpoint of the thread."""
        entries: list[tuple[str, str, str, int]] = []
        for thread_id, sid in threads:
            key = _ns_key(ns)
            with self._fold_lock:
                try:
                    fold = self._fold(sid)
                except SessionNotFound:
                    continue
                ids = fold.ids.get(key, [])
                hi = bisect.bisect_left(ids, before_id) if before_id else len(ids)
                if cid:
                    keep = (key, cid) in fold.seqs and (not before_id or cid < before_id)
                    chosen = [cid] if keep else []
                else:
                    lo = 0 if most is None else max(0, hi - most)
                    chosen = ids[lo:hi]
                    chosen.reverse()
                entries.extend((c, thread_id, sid, fold.seqs[(key, c)]) for c in chosen)
        return entries

    def _threads(self) -> Iterator[tuple[str, str]]:
        """(thread id, session id) of every LangGraph thread's session."""
        cursor = None
        while True:
            page = self.ledger.list_sessions(
                app=APP, status=_FIND_STATUSES, limit=1000, cursor=cursor
            )
            for s in page["sessions"]:
                lg = (s.get("metadata") or {}).get("langgraph") or {}
                if "thread_id_hex" in lg:
                    yield _unhex(lg["thread_id_hex"]), s["session_id"]
            cursor = page.get("next_cursor")
            if not cursor:
                break

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Records ``checkpoint`` as a logbook checkpoint of the thread's
        session (created on the thread's first checkpoint)."""
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        ns = conf.get("checkpoint_ns", "")
        cp_type, cp_bytes = self.serde.dumps_typed(checkpoint)
        md_type, md_bytes = self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))
        cid = checkpoint["id"]
        state = {
            "v": STATE_VERSION,
            "checkpoint_ns": _hex(ns),
            "checkpoint_id": cid,
            "parent_checkpoint_id": conf.get("checkpoint_id"),
            "checkpoint": {"type": cp_type, "bytes": len(cp_bytes)},
            "metadata": {"type": md_type, "bytes": len(md_bytes)},
        }
        payload = cp_bytes + md_bytes
        step = f"{_STEP}{_ns_key(ns)} {_hex(cid)}"
        first = {"step": step, "state": state, "payload": payload}
        if not self._create_with(thread_id, first):
            key = self._key()
            self._write(
                thread_id,
                lambda sid: self.ledger.checkpoint(
                    sid, step=step, state=state, payload=payload, idempotency_key=key
                ),
            )
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": cid,
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Records a task's writes for a checkpoint as one
        ``x.langgraph.writes`` event of the thread's session."""
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        data = {
            "v": STATE_VERSION,
            "ns": _hex(conf.get("checkpoint_ns", "")),
            "checkpoint_id": _hex(conf["checkpoint_id"]),
            "task_id": _hex(task_id),
            "task_path": _hex(task_path),
            "writes": [],
        }
        for idx, (channel, value) in enumerate(writes):
            t, b = self.serde.dumps_typed(value)
            data["writes"].append(
                {
                    "idx": WRITES_IDX_MAP.get(channel, idx),
                    "channel": _hex(channel),
                    "type": t,
                    "value": b.hex(),
                }
            )
        key = self._key()
        self._write(
            thread_id,
            lambda sid: self.ledger.append_event(
                sid, type=WRITES_EVENT, data=data, idempotency_key=key
            ),
        )

    def delete_thread(self, thread_id: str) -> None:
        """Removes a thread the logbook way: its session is cancelled, then
        purged (a tombstone and the purge record stay), and no other
        (docs/python.md)."""
        self._forget(thread_id)
        page = self.ledger.list_sessions(app=APP, tag=_thread_tag(thread_id), limit=1000)
        ids = []
        for s in page["sessions"]:
            ids.append(s["session_id"])
            if s["status"] in ("pending", "active", "paused"):
                self.ledger.cancel(
                    s["session_id"], reason="langgraph delete_thread", idempotency_key=self._key()
                )
        if ids:
            self.ledger.purge(session=ids)
        self._forget(thread_id)

    # -- extended capabilities: copy_thread, prune, delete_for_runs ----------
    #
    # A logbook session's rows are never deleted one by one (docs/design.md,
    # "Retention"): a thread that loses some of its checkpoints is
    # *superseded* — its kept checkpoints and their writes are replayed, in
    # their order, into a fresh session of the thread, and the old session is
    # cancelled and purged (a tombstone and the purge record stay).

    def _events(self, sid: str, after: Optional[int] = None) -> list[dict]:
        """Every event of a session after ``after`` (seq), oldest first."""
        out: list[dict] = []
        while True:
            page = self.ledger.session_events(sid, after_seq=after, limit=1000)
            out.extend(page["events"])
            after = page.get("next_after_seq")
            if after is None:
                return out

    @staticmethod
    def _items(events: list[dict]) -> list[tuple]:
        """The LangGraph records among ``events``, in order:
        ``("cp", seq, step, (ns key, checkpoint id))`` for a checkpoint and
        ``("w", seq, data, (ns key, checkpoint id))`` for a writes event."""
        items: list[tuple] = []
        for e in events:
            d = e.get("data") or {}
            if e["type"] == "checkpoint":
                step = d.get("step") or ""
                if not step.startswith(_STEP):
                    continue
                parts = step[len(_STEP):].split(" ")
                if len(parts) == 2:
                    items.append(("cp", e["seq"], step, (parts[0], _unhex(parts[1]))))
            elif e["type"] == WRITES_EVENT and d:
                key = (_ns_key(_unhex(d["ns"])), _unhex(d["checkpoint_id"]))
                items.append(("w", e["seq"], d, key))
        return items

    def _replay(self, src: str, dst: str, items: list[tuple]) -> None:
        """Writes ``items`` of session ``src`` into session ``dst``: each
        checkpoint with its snapshot state, each writes event as it is."""
        for kind, seq, item, _ in items:
            if kind == "cp":
                snap = self.ledger.snapshot(src, checkpoint=seq)
                self.ledger.checkpoint(
                    dst, step=item, state=snap["state"], payload=snap["payload"]
                )
            else:
                self.ledger.append_event(dst, type=WRITES_EVENT, data=item)

    def _new_session(
        self,
        thread_id: str,
        *,
        parent: Optional[str] = None,
        checkpoint: Optional[dict] = None,
        **extra: Any,
    ) -> str:
        lg = {"thread_id_hex": _hex(thread_id)}
        lg.update(extra)
        s = self.ledger.create_session(
            "LangGraph thread",
            app=APP,
            tag=[_thread_tag(thread_id)],
            parent=parent,
            metadata={"langgraph": lg},
            checkpoint=checkpoint,
        )
        return s["session_id"]

    def _current(self, thread_id: str) -> Optional[str]:
        """The thread's session, looked up afresh (not from the cache)."""
        self._forget(thread_id)
        return self._find(thread_id)

    def _supersede(self, thread_id: str, keep) -> None:
        """Keeps the checkpoints of ``thread_id`` that ``keep(sid, cps)``
        names (``cps``: {(ns key, checkpoint id): seq}, the newest seq of
        each), and their writes; drops the others, the logbook way."""
        old = self._current(thread_id)
        if old is None:
            return
        try:
            events = self._events(old)
        except SessionNotFound:
            return
        items = self._items(events)
        cps: dict[tuple[str, str], int] = {}
        for kind, seq, _, key in items:
            if kind == "cp":
                cps[key] = max(cps.get(key, -1), seq)
        kept = keep(old, cps)
        if set(cps) <= kept:
            return  # nothing to drop
        if not kept:
            self.delete_thread(thread_id)
            return
        last = events[-1]["seq"] if events else None
        new = self._new_session(thread_id, supersedes=old)
        self._replay(old, new, [i for i in items if i[3] in kept])
        with self._lock:
            self._sessions[thread_id] = new
        # Ended, the old session takes no more writes (a saver that cached it
        # moves to the new one, see _write); what reached it meanwhile follows.
        try:
            status = self.ledger.show_session(old)["session"]["status"]
            if status in ("pending", "active", "paused"):
                self.ledger.cancel(
                    old, reason=f"langgraph: superseded by {new}", idempotency_key=self._key()
                )
            self._replay(old, new, self._items(self._events(old, after=last)))
        except SessionNotFound:
            return
        self.ledger.purge(session=[old])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copies every checkpoint and pending write of a thread, in order,
        into another: the target's session is created as a child of the
        source's (``session tree`` shows the lineage), or, when the target
        thread already has one, the copy is added to it. A source without a
        session copies nothing (docs/python.md)."""
        if source_thread_id == target_thread_id:
            return
        src = self._current(source_thread_id)
        if src is None:
            return
        items = self._items(self._events(src))
        if not items:
            return
        with self._create_lock:
            dst = self._current(target_thread_id)
            if dst is None:
                dst = self._new_session(target_thread_id, parent=src, copied_from=src)
                with self._lock:
                    self._sessions[target_thread_id] = dst
        self._replay(src, dst, items)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: each thread keeps its newest checkpoint per
        namespace (and, for a ``DeltaChannel`` not snapshotted there, the
        ancestors back to its snapshot) with their writes, in a fresh
        session; the old session is cancelled and purged. ``"delete"``:
        ``delete_thread`` on each (docs/python.md)."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"prune: unknown strategy {strategy!r} (keep_latest or delete)")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
            else:
                self._supersede(thread_id, self._keep_latest)

    def _decoded_state(self, sid: str, seq: int) -> tuple[dict, Any, Any]:
        state, cp_type, cp_bytes, md_type, md_bytes = _blobs(
            self.ledger.snapshot(sid, checkpoint=seq)
        )
        return (
            state,
            self.serde.loads_typed((cp_type, cp_bytes)),
            self.serde.loads_typed((md_type, md_bytes)),
        )

    def _keep_latest(self, sid: str, cps: dict[tuple[str, str], int]) -> set:
        """The newest checkpoint of each namespace, and the ancestors a
        ``DeltaChannel`` needs: LangGraph rebuilds a delta channel missing
        from a checkpoint's values from its ancestors' writes back to the
        nearest one holding a value (``get_delta_channel_history``), and
        the metadata's ``counters_since_delta_snapshot`` names them."""
        newest: dict[str, str] = {}
        for ns, cid in cps:
            if ns not in newest or cid > newest[ns]:
                newest[ns] = cid
        kept = set()
        for ns, cid in newest.items():
            kept.add((ns, cid))
            state, cp, md = self._decoded_state(sid, cps[(ns, cid)])
            counters = (md or {}).get("counters_since_delta_snapshot") or {}
            need = {
                ch
                for ch in counters
                if ch in cp["channel_versions"] and ch not in cp["channel_values"]
            }
            parent = state.get("parent_checkpoint_id")
            while need and parent and (ns, parent) in cps and (ns, parent) not in kept:
                kept.add((ns, parent))
                state, cp, _ = self._decoded_state(sid, cps[(ns, parent)])
                need = {ch for ch in need if ch not in cp["channel_values"]}
                parent = state.get("parent_checkpoint_id")
        return kept

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Drops every checkpoint whose metadata ``run_id`` is one of
        ``run_ids``, with its writes, in every thread: a thread that has one
        is superseded by a fresh session holding the rest (or deleted, when
        nothing is left), as ``prune`` does (docs/python.md)."""
        runs = set(run_ids)
        if not runs:
            return

        def keep(sid: str, cps: dict[tuple[str, str], int]) -> set:
            return {
                key for key, seq in cps.items() if self._decoded_state(sid, seq)[2].get("run_id") not in runs
            }

        for thread_id in dict(self._threads()):
            self._supersede(thread_id, keep)

    def get_next_version(self, current: Optional[str], channel: None = None) -> str:
        """Versions as LangGraph's own savers make them: a zero-padded
        counter and a random fraction."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # -- async twins: the blocking call in a thread ---------------------------

    async def aget_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        """``get_tuple`` in a thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """``list`` in a thread."""
        items = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """``put`` in a thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """``put_writes`` in a thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """``delete_thread`` in a thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """``copy_thread`` in a thread."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``prune`` in a thread."""
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """``delete_for_runs`` in a thread."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)


class AsyncLogbookSaver(LogbookSaver):
    """``LogbookSaver`` for asyncio code: ``async with
    AsyncLogbookSaver.from_conn_string(db) as saver``. Its ``a*`` methods
    run the blocking ledger call in a thread."""

    @classmethod
    @asynccontextmanager
    async def from_conn_string(  # type: ignore[override]
        cls, db: Optional[str] = None
    ) -> AsyncIterator["AsyncLogbookSaver"]:
        """A saver on ``db`` whose ledger is closed when the block ends."""
        saver = await asyncio.to_thread(cls, db)
        try:
            yield saver
        finally:
            await asyncio.to_thread(saver.ledger.close)


__all__ = ["APP", "WRITES_EVENT", "AsyncLogbookSaver", "LogbookSaver"]
