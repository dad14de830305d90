-- V1: the core ledger (SPEC §1, §2): sessions, their events, and the triggers
-- that keep the ledger's invariants even against raw SQL from an operator.
--
-- Write-path design: a checkpoint is the hot mutation. It rewrites one narrow
-- `sessions` row, moves one entry of `sessions_by_updated`, and appends one
-- `events` row plus one `events_by_session_seq` entry: five B-tree pages per
-- commit. To keep it there:
-- - wide, rarely changing values (goal, context, metadata) live in
--   `session_data`, so a checkpoint never rewrites their overflow pages;
-- - the latest checkpoint's step and note are read from its event
--   (`checkpoint_seq`), so the row barely grows and its page rarely splits;
-- - linked references live in `session_refs`, so the row does not grow;
-- - rowids are INTEGER PRIMARY KEYs without AUTOINCREMENT (rows are never
--   deleted, so ids are never reused), which saves the sqlite_sequence page;
-- - the optional-column indexes are deliberately NOT partial
--   (`WHERE col IS NOT NULL`): a query with a bound parameter on `sessions`
--   makes SQLite check that parameter against every partial index's WHERE,
--   which marks the prepared statement for re-preparation whenever the
--   binding changes, so every cached statement would be recompiled per call.
-- Every list filter index ends in `created_at_ms` (plus the implicit rowid),
-- so `ORDER BY created_at_ms DESC, insert_seq DESC` never needs a temp B-tree.
--
-- Schema features stay within SQLite 3.37 (STRICT), so Debian 12's sqlite3
-- (3.40) and Python 3.11's sqlite3 module read everything here.
--
-- Closed value sets in CHECKs and triggers are written as `=` … `OR` chains,
-- not `IN (…)`: SQLite builds a temporary B-tree for every IN list of three
-- or more constants each time a statement runs, which showed up as the
-- largest single cost of a checkpoint.

CREATE TABLE sessions (
    -- Immutable, monotonic insertion key: the list cursor's tie-breaker.
    -- Sessions are never deleted (trigger), so rowids are never reused.
    insert_seq          INTEGER PRIMARY KEY,
    session_id          TEXT NOT NULL UNIQUE
                        CHECK (length(session_id) = 20 AND session_id GLOB 'ses_[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'),
    status              TEXT NOT NULL
                        CHECK (status = 'pending' OR status = 'active' OR status = 'paused'
                               OR status = 'completed' OR status = 'failed' OR status = 'cancelled'),
    title               TEXT NOT NULL,
    app                 TEXT,
    agent_id            TEXT,
    route               TEXT,
    stage               TEXT,
    parent_session_id   TEXT REFERENCES sessions (session_id),
    tags                TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tags) AND json_type(tags) = 'array'),
    actor_type          TEXT NOT NULL CHECK (actor_type = 'cli' OR actor_type = 'mcp' OR actor_type = 'lib'),
    actor_id            TEXT,
    actor_authenticated INTEGER NOT NULL DEFAULT 0 CHECK (actor_authenticated IN (0, 1)),
    rev                 INTEGER NOT NULL CHECK (rev >= 1),
    -- seq of the latest `checkpoint` event (its step, note and time live there).
    checkpoint_seq      INTEGER,
    final_result        TEXT,
    end_reason          TEXT,
    input_tokens        INTEGER NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens       INTEGER NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    api_calls           INTEGER NOT NULL DEFAULT 0 CHECK (api_calls >= 0),
    duration_ms         INTEGER NOT NULL DEFAULT 0 CHECK (duration_ms >= 0),
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    ended_at_ms         INTEGER
) STRICT;

-- `session list` (newest created first) and `--since/--until`.
CREATE INDEX sessions_by_created ON sessions (created_at_ms);
-- `session list --order updated`; the only index a checkpoint moves.
CREATE INDEX sessions_by_updated ON sessions (updated_at_ms);
-- `session list --status S` (repeatable: one range per status, merged).
CREATE INDEX sessions_by_status ON sessions (status, created_at_ms);
-- `session list --app A`.
CREATE INDEX sessions_by_app ON sessions (app, created_at_ms);
-- `session list --status S --app A`, the dashboard's usual pair: without it
-- the walk takes one of the two single-column ranges and filters the other,
-- which costs a scan of the whole range when the pair is rare.
CREATE INDEX sessions_by_status_app ON sessions (status, app, created_at_ms);
-- `session list --agent ID`.
CREATE INDEX sessions_by_agent ON sessions (agent_id, created_at_ms);
-- `session list --parent SES` and hierarchy walks.
CREATE INDEX sessions_by_parent ON sessions (parent_session_id, created_at_ms);

-- Wide values written at create (and by later restore features); kept out of
-- the hot `sessions` row. Keyed by the session's insert_seq, so a create
-- appends here and writes no secondary index.
CREATE TABLE session_data (
    insert_seq  INTEGER PRIMARY KEY REFERENCES sessions (insert_seq),
    session_id  TEXT NOT NULL REFERENCES sessions (session_id),
    goal        TEXT,
    context     TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(context) AND json_type(context) = 'object'),
    metadata    TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata) AND json_type(metadata) = 'object')
) STRICT;

-- One row per (session, tag); serves `session list --tag T` in created order.
CREATE TABLE session_tags (
    tag             TEXT NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    insert_seq      INTEGER NOT NULL REFERENCES sessions (insert_seq),
    session_id      TEXT NOT NULL REFERENCES sessions (session_id),
    PRIMARY KEY (tag, created_at_ms, insert_seq)
) STRICT, WITHOUT ROWID;

-- Linked plan / operation / deployment ids, de-duplicated, in first-linked
-- order (`ordinal` counts from 0 per session and kind).
CREATE TABLE session_refs (
    session_id  TEXT NOT NULL REFERENCES sessions (session_id),
    kind        TEXT NOT NULL CHECK (kind = 'plan' OR kind = 'operation' OR kind = 'deployment'),
    ref_id      TEXT NOT NULL,
    ordinal     INTEGER NOT NULL CHECK (ordinal >= 0),
    linked_seq  INTEGER NOT NULL,
    PRIMARY KEY (session_id, kind, ref_id),
    UNIQUE (session_id, kind, ordinal)
) STRICT, WITHOUT ROWID;

-- The append-only timeline. `event_id` is the global, durable cursor. It is an
-- INTEGER PRIMARY KEY without AUTOINCREMENT: events can never be deleted (see
-- the triggers below), so ids are never reused, and the commit skips the
-- sqlite_sequence page that AUTOINCREMENT would write on every append.
CREATE TABLE events (
    event_id        INTEGER PRIMARY KEY,
    session_id      TEXT NOT NULL REFERENCES sessions (session_id),
    seq             INTEGER NOT NULL CHECK (seq >= 0),
    type            TEXT NOT NULL CHECK (length(type) BETWEEN 1 AND 64),
    at_ms           INTEGER NOT NULL,
    actor_type      TEXT NOT NULL CHECK (actor_type = 'cli' OR actor_type = 'mcp' OR actor_type = 'lib'),
    detail          TEXT,
    data            TEXT CHECK (data IS NULL OR (json_valid(data) AND json_type(data) = 'object')),
    run_id          TEXT
) STRICT;

-- `session show` / `session events`, and the contiguity trigger's max(seq).
CREATE UNIQUE INDEX events_by_session_seq ON events (session_id, seq);
-- Idempotent retries: the event each (key, session) produced, with a SHA-256
-- (hex) of the redacted request that came with the key. A table of its own
-- rather than nullable columns on `events`: an index on those would either
-- cost every append a page (full) or, partial, force SQLite to re-prepare
-- every statement that binds a parameter against `events` columns.
CREATE TABLE idempotency_keys (
    -- SHA-256 (hex) of the caller's key: the key itself is never stored.
    key_sha256      TEXT NOT NULL,
    session_id      TEXT NOT NULL REFERENCES sessions (session_id),
    event_id        INTEGER NOT NULL REFERENCES events (event_id),
    request_digest  TEXT NOT NULL,
    PRIMARY KEY (key_sha256, session_id)
) STRICT, WITHOUT ROWID;

CREATE TRIGGER idempotency_keys_no_update BEFORE UPDATE ON idempotency_keys
BEGIN
    SELECT RAISE(ABORT, 'logbook: idempotency keys are append-only');
END;

CREATE TRIGGER idempotency_keys_no_delete BEFORE DELETE ON idempotency_keys
BEGIN
    SELECT RAISE(ABORT, 'logbook: idempotency keys are append-only');
END;

CREATE TRIGGER idempotency_keys_no_replace BEFORE INSERT ON idempotency_keys
WHEN EXISTS (SELECT 1 FROM idempotency_keys WHERE key_sha256 = NEW.key_sha256 AND session_id = NEW.session_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: idempotency keys are append-only');
END;

-- Invariant: events are append-only.
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'logbook: events are append-only; UPDATE is not allowed');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'logbook: events are append-only; DELETE is not allowed');
END;

-- Invariant: a session's seqs are contiguous from 0, an event belongs to an
-- existing session (even with foreign_keys off in an operator's shell), and
-- an insert never replaces an existing event (`INSERT OR REPLACE` deletes the
-- conflicting row without firing DELETE triggers).
CREATE TRIGGER events_seq_contiguous BEFORE INSERT ON events
WHEN NEW.seq IS NOT (SELECT coalesce(max(seq) + 1, 0) FROM events WHERE session_id = NEW.session_id)
  OR NOT EXISTS (SELECT 1 FROM sessions WHERE session_id = NEW.session_id)
  OR EXISTS (SELECT 1 FROM events WHERE event_id = NEW.event_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: an event''s seq must be its session''s previous max seq + 1, its session must exist, and it may not replace another event');
END;

-- Invariant: a new session never replaces an existing one (REPLACE).
CREATE TRIGGER sessions_no_replace BEFORE INSERT ON sessions
WHEN EXISTS (SELECT 1 FROM sessions WHERE insert_seq = NEW.insert_seq OR session_id = NEW.session_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: a session cannot replace another session');
END;

-- Invariant: sessions are never deleted.
CREATE TRIGGER sessions_no_delete BEFORE DELETE ON sessions
BEGIN
    SELECT RAISE(ABORT, 'logbook: sessions are never deleted');
END;

-- Invariant: a terminal session is frozen.
CREATE TRIGGER sessions_terminal_frozen BEFORE UPDATE ON sessions
WHEN OLD.status = 'completed' OR OLD.status = 'failed' OR OLD.status = 'cancelled'
BEGIN
    SELECT RAISE(ABORT, 'logbook: a session in a terminal status cannot be updated');
END;

-- Invariant: every UPDATE bumps rev by exactly 1, and identity never changes.
CREATE TRIGGER sessions_rev_step BEFORE UPDATE ON sessions
WHEN NEW.rev IS NOT OLD.rev + 1
  OR NEW.session_id IS NOT OLD.session_id
  OR NEW.insert_seq IS NOT OLD.insert_seq
  OR NEW.created_at_ms IS NOT OLD.created_at_ms
BEGIN
    SELECT RAISE(ABORT, 'logbook: a session UPDATE must set rev = rev + 1 and keep its identity');
END;

CREATE TRIGGER session_data_no_delete BEFORE DELETE ON session_data
BEGIN
    SELECT RAISE(ABORT, 'logbook: session data is never deleted');
END;

CREATE TRIGGER session_data_no_replace BEFORE INSERT ON session_data
WHEN EXISTS (SELECT 1 FROM session_data WHERE insert_seq = NEW.insert_seq)
BEGIN
    SELECT RAISE(ABORT, 'logbook: session data cannot be replaced');
END;

-- A terminal session's data is frozen with it.
CREATE TRIGGER session_data_terminal_frozen BEFORE UPDATE ON session_data
WHEN (SELECT status FROM sessions WHERE insert_seq = OLD.insert_seq) = 'completed'
  OR (SELECT status FROM sessions WHERE insert_seq = OLD.insert_seq) = 'failed'
  OR (SELECT status FROM sessions WHERE insert_seq = OLD.insert_seq) = 'cancelled'
  OR NEW.insert_seq IS NOT OLD.insert_seq
  OR NEW.session_id IS NOT OLD.session_id
BEGIN
    SELECT RAISE(ABORT, 'logbook: the data of a session in a terminal status cannot be updated');
END;

CREATE TRIGGER session_tags_no_update BEFORE UPDATE ON session_tags
BEGIN
    SELECT RAISE(ABORT, 'logbook: session tags are immutable');
END;

CREATE TRIGGER session_tags_no_delete BEFORE DELETE ON session_tags
BEGIN
    SELECT RAISE(ABORT, 'logbook: session tags are immutable');
END;

CREATE TRIGGER session_tags_no_replace BEFORE INSERT ON session_tags
WHEN EXISTS (SELECT 1 FROM session_tags WHERE tag = NEW.tag AND created_at_ms = NEW.created_at_ms AND insert_seq = NEW.insert_seq)
BEGIN
    SELECT RAISE(ABORT, 'logbook: session tags are immutable');
END;

CREATE TRIGGER session_refs_no_update BEFORE UPDATE ON session_refs
BEGIN
    SELECT RAISE(ABORT, 'logbook: linked references are append-only');
END;

CREATE TRIGGER session_refs_no_delete BEFORE DELETE ON session_refs
BEGIN
    SELECT RAISE(ABORT, 'logbook: linked references are append-only');
END;

CREATE TRIGGER session_refs_no_replace BEFORE INSERT ON session_refs
WHEN EXISTS (SELECT 1 FROM session_refs WHERE session_id = NEW.session_id AND kind = NEW.kind
             AND (ref_id = NEW.ref_id OR ordinal = NEW.ordinal))
BEGIN
    SELECT RAISE(ABORT, 'logbook: linked references are append-only');
END;
