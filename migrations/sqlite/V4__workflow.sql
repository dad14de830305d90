-- V4: workflow (issue 4 §3 checkpoint snapshots, §4 gates, §6 leases; the
-- Amber seed's checkpoint manager, gate handler and session lock).
--
-- Each feature has a table of its own instead of columns on `sessions`: a
-- snapshot can be 256 KiB, and the `sessions` row is rewritten on every
-- mutation (see V1), so a wide value there would cost its overflow pages in
-- the WAL on every checkpoint. Nothing here is read on the hot write path
-- except `session_leases`, one primary-key look-up per mutation (an empty or
-- tiny table: its root page stays cached).
--
-- (V3 belongs to another feature branch; refinery's applier and logbook's
-- own handle a gap in the version numbers.)

-- Checkpoint snapshots: the `--state` JSON object given to
-- `session checkpoint`, stored with the checkpoint event it belongs to.
-- A rowid table (not WITHOUT ROWID): rows are up to 256 KiB.
CREATE TABLE session_snapshots (
    snapshot_id INTEGER PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions (session_id),
    -- seq of the `checkpoint` event that stored it.
    seq         INTEGER NOT NULL CHECK (seq >= 0),
    step        TEXT,
    -- The session's `stage` when the snapshot was taken (restored with it).
    stage       TEXT,
    state       TEXT NOT NULL CHECK (json_valid(state) AND json_type(state) = 'object'),
    -- Bytes of `state` (compact, redacted JSON as stored).
    size_bytes  INTEGER NOT NULL CHECK (size_bytes = length(CAST(state AS BLOB))),
    at_ms       INTEGER NOT NULL
) STRICT;

-- `session checkpoints ID`, `restore --checkpoint SEQ`, `fork`; one
-- snapshot per checkpoint event.
CREATE UNIQUE INDEX session_snapshots_by_session_seq ON session_snapshots (session_id, seq);

-- A snapshot belongs to an existing checkpoint event of its session and is
-- never changed, removed or replaced.
CREATE TRIGGER session_snapshots_append_only BEFORE INSERT ON session_snapshots
WHEN NOT EXISTS (SELECT 1 FROM events WHERE session_id = NEW.session_id AND seq = NEW.seq AND type = 'checkpoint')
  OR EXISTS (SELECT 1 FROM session_snapshots WHERE snapshot_id = NEW.snapshot_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: a snapshot belongs to an existing checkpoint event and cannot replace another');
END;

CREATE TRIGGER session_snapshots_no_update BEFORE UPDATE ON session_snapshots
BEGIN
    SELECT RAISE(ABORT, 'logbook: snapshots are immutable');
END;

CREATE TRIGGER session_snapshots_no_delete BEFORE DELETE ON session_snapshots
BEGIN
    SELECT RAISE(ABORT, 'logbook: snapshots are immutable');
END;

-- Gates: one row per opened gate. A name may be opened again once its
-- previous gate is decided (`round` counts from 1 per session and name).
-- `auto` gates are inserted already approved.
CREATE TABLE session_gates (
    gate_id        INTEGER PRIMARY KEY,
    session_id     TEXT NOT NULL REFERENCES sessions (session_id),
    name           TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    round          INTEGER NOT NULL CHECK (round >= 1),
    kind           TEXT NOT NULL CHECK (kind = 'auto' OR kind = 'user-approval' OR kind = 'step-confirm'),
    status         TEXT NOT NULL CHECK (status = 'pending' OR status = 'approved' OR status = 'rejected'),
    opened_seq     INTEGER NOT NULL CHECK (opened_seq >= 0),
    opened_at_ms   INTEGER NOT NULL,
    decided_seq    INTEGER,
    decided_at_ms  INTEGER,
    -- The approval note or rejection reason, or NULL.
    reason         TEXT,
    -- For a rejection: `failed`, or `cancelled` with --abort; else NULL.
    outcome        TEXT CHECK (outcome IS NULL OR outcome = 'failed' OR outcome = 'cancelled'),
    CHECK ((status = 'pending') = (decided_seq IS NULL)),
    CHECK ((status = 'pending') = (decided_at_ms IS NULL))
) STRICT;

-- `gate list`, the latest round of a name, and `show`'s blocking gate.
CREATE UNIQUE INDEX session_gates_by_session_name ON session_gates (session_id, name, round);

-- A gate is decided once: the only UPDATE is pending → approved | rejected,
-- and it keeps the gate's identity.
CREATE TRIGGER session_gates_decide_once BEFORE UPDATE ON session_gates
WHEN OLD.status IS NOT 'pending' OR NEW.status = 'pending'
  OR NEW.gate_id IS NOT OLD.gate_id OR NEW.session_id IS NOT OLD.session_id
  OR NEW.name IS NOT OLD.name OR NEW.round IS NOT OLD.round OR NEW.kind IS NOT OLD.kind
  OR NEW.opened_seq IS NOT OLD.opened_seq OR NEW.opened_at_ms IS NOT OLD.opened_at_ms
BEGIN
    SELECT RAISE(ABORT, 'logbook: a gate is decided once and keeps its identity');
END;

CREATE TRIGGER session_gates_no_delete BEFORE DELETE ON session_gates
BEGIN
    SELECT RAISE(ABORT, 'logbook: gates are never deleted');
END;

CREATE TRIGGER session_gates_no_replace BEFORE INSERT ON session_gates
WHEN EXISTS (SELECT 1 FROM session_gates WHERE gate_id = NEW.gate_id
             OR (session_id = NEW.session_id AND name = NEW.name AND round = NEW.round))
BEGIN
    SELECT RAISE(ABORT, 'logbook: a gate cannot replace another gate');
END;

-- Leases (the Amber seed's session lock): at most one per session. This is
-- current state, not history: `session unlock` deletes the row and a
-- takeover overwrites it; the history is in the `lease_*` events. Only the
-- SHA-256 of the token is stored: the token itself is a credential, printed
-- once to the process that took the lease.
CREATE TABLE session_leases (
    session_id      TEXT PRIMARY KEY REFERENCES sessions (session_id),
    token_sha256    TEXT NOT NULL CHECK (length(token_sha256) = 64),
    pid             INTEGER NOT NULL CHECK (pid > 0),
    hostname        TEXT NOT NULL,
    acquired_at_ms  INTEGER NOT NULL,
    expires_at_ms   INTEGER NOT NULL CHECK (expires_at_ms > acquired_at_ms),
    -- seq of the `lease_acquired` / `lease_taken_over` event.
    acquired_seq    INTEGER NOT NULL CHECK (acquired_seq >= 0)
) STRICT, WITHOUT ROWID;
