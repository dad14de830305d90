-- V7: safe retention (SPEC §8, issue 16): purge records, tombstones, and
-- append-only triggers that allow exactly the deletes a tombstone covers.
--
-- `purges`: one immutable row per purge, written before its first batch:
-- when, by whom, the filter as given, and what the purge chose (sessions,
-- events, bytes of their text values). Its progress is its tombstones
-- (`v_purges`).
--
-- `tombstones`: one immutable row per purged session incarnation, written
-- in the transaction that deletes the session's rows, keyed by
-- (session_id, insert_seq): a session exported, purged and imported again
-- is a new incarnation (a new insert_seq), which the old tombstone does not
-- cover. The insert trigger checks that the row tells the truth about the
-- session (title, status, event count, newest event's id and hash) and that
-- the session is ended with no live child; a tombstone whose purge has no
-- `purges` row (raw SQL) records one itself, actor 'sql', so no delete goes
-- unrecorded.
--
-- Deletes: each `*_no_delete` trigger of V1–V4 is replaced by one that
-- refuses unless the session's current incarnation has a tombstone. A
-- session row goes only after its events.
--
-- Ids are never reused: a purge can remove the newest event or session,
-- and SQLite hands out max(rowid) + 1, so logbook's inserts give event_id
-- and insert_seq explicitly, above every tombstone's (the two indexes
-- below), and a follower's cursor never meets a reused id.
--
-- A purged parent whose children remain: the child keeps its
-- parent_session_id, which names the tombstone. The purge deletes that
-- parent with foreign-key enforcement off on its own connection (its
-- children are ended and frozen); `doctor` counts such a reference as a
-- purged parent, not as a broken key.

CREATE TABLE purges (
    purge_id    INTEGER PRIMARY KEY,
    at_ms       INTEGER NOT NULL,
    actor_type  TEXT NOT NULL CHECK (actor_type = 'cli' OR actor_type = 'mcp' OR actor_type = 'lib' OR actor_type = 'sql'),
    actor_id    TEXT,
    filter      TEXT NOT NULL CHECK (json_valid(filter) AND json_type(filter) = 'object'),
    sessions    INTEGER NOT NULL CHECK (sessions >= 0),
    events      INTEGER NOT NULL CHECK (events >= 0),
    bytes       INTEGER NOT NULL CHECK (bytes >= 0)
) STRICT;

CREATE TABLE tombstones (
    session_id          TEXT NOT NULL,
    insert_seq          INTEGER NOT NULL,
    purge_id            INTEGER NOT NULL REFERENCES purges (purge_id),
    title               TEXT NOT NULL,
    status              TEXT NOT NULL,
    app                 TEXT,
    parent_session_id   TEXT,
    created_at_ms       INTEGER NOT NULL,
    ended_at_ms         INTEGER,
    events              INTEGER NOT NULL CHECK (events >= 0),
    last_event_id       INTEGER,
    last_hash           BLOB,
    bytes               INTEGER NOT NULL CHECK (bytes >= 0),
    purged_at_ms        INTEGER NOT NULL,
    PRIMARY KEY (session_id, insert_seq)
) STRICT, WITHOUT ROWID;

CREATE INDEX tombstones_by_purge ON tombstones (purge_id);
CREATE INDEX tombstones_by_event ON tombstones (last_event_id);
CREATE INDEX tombstones_by_insert_seq ON tombstones (insert_seq);

CREATE TRIGGER purges_no_update BEFORE UPDATE ON purges
BEGIN
    SELECT RAISE(ABORT, 'logbook: purge records are immutable');
END;

CREATE TRIGGER purges_no_delete BEFORE DELETE ON purges
BEGIN
    SELECT RAISE(ABORT, 'logbook: purge records are immutable');
END;

CREATE TRIGGER purges_no_replace BEFORE INSERT ON purges
WHEN EXISTS (SELECT 1 FROM purges WHERE purge_id = NEW.purge_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: purge records are immutable');
END;

CREATE TRIGGER tombstones_no_update BEFORE UPDATE ON tombstones
BEGIN
    SELECT RAISE(ABORT, 'logbook: tombstones are immutable');
END;

CREATE TRIGGER tombstones_no_delete BEFORE DELETE ON tombstones
BEGIN
    SELECT RAISE(ABORT, 'logbook: tombstones are immutable');
END;

CREATE TRIGGER tombstones_truthful BEFORE INSERT ON tombstones
WHEN EXISTS (SELECT 1 FROM tombstones WHERE session_id = NEW.session_id AND insert_seq = NEW.insert_seq)
  OR NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = NEW.session_id
      AND s.insert_seq = NEW.insert_seq AND s.title = NEW.title AND s.status = NEW.status
      AND (s.status = 'completed' OR s.status = 'failed' OR s.status = 'cancelled')
      AND s.app IS NEW.app AND s.parent_session_id IS NEW.parent_session_id
      AND s.created_at_ms = NEW.created_at_ms AND s.ended_at_ms IS NEW.ended_at_ms)
  OR NEW.events IS NOT (SELECT count(*) FROM events WHERE session_id = NEW.session_id)
  OR NEW.last_event_id IS NOT (SELECT event_id FROM events WHERE session_id = NEW.session_id ORDER BY seq DESC LIMIT 1)
  OR NEW.last_hash IS NOT (SELECT hash FROM events WHERE session_id = NEW.session_id ORDER BY seq DESC LIMIT 1)
  OR EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session_id = NEW.session_id
      AND (c.status = 'pending' OR c.status = 'active' OR c.status = 'paused'))
BEGIN
    SELECT RAISE(ABORT, 'logbook: a tombstone must name an ended session with no live child, once, and match its title, status, times, event count and newest event');
END;

-- Raw SQL that writes a tombstone under a purge id of its own is recorded.
CREATE TRIGGER tombstones_recorded BEFORE INSERT ON tombstones
WHEN NEW.purge_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM purges WHERE purge_id = NEW.purge_id)
BEGIN
    INSERT INTO purges (purge_id, at_ms, actor_type, actor_id, filter, sessions, events, bytes)
    VALUES (NEW.purge_id, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER), 'sql', NULL, '{"raw_sql":true}', 0, 0, 0);
END;

-- The deletes a tombstone covers: the rows of a session whose current
-- incarnation is tombstoned.
DROP TRIGGER events_no_delete;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM tombstones t JOIN sessions s ON s.session_id = t.session_id AND s.insert_seq = t.insert_seq
                 WHERE t.session_id = OLD.session_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: events are append-only; DELETE is allowed only for a purged session (a tombstone written in the same transaction)');
END;

DROP TRIGGER sessions_no_delete;
CREATE TRIGGER sessions_no_delete BEFORE DELETE ON sessions
WHEN NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.session_id = OLD.session_id AND t.insert_seq = OLD.insert_seq)
  OR EXISTS (SELECT 1 FROM events WHERE session_id = OLD.session_id)
  OR EXISTS (SELECT 1 FROM session_data WHERE insert_seq = OLD.insert_seq)
BEGIN
    SELECT RAISE(ABORT, 'logbook: sessions are never deleted, except a purged one (a tombstone written in the same transaction) after its events and data');
END;

DROP TRIGGER session_data_no_delete;
CREATE TRIGGER session_data_no_delete BEFORE DELETE ON session_data
WHEN NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.session_id = OLD.session_id AND t.insert_seq = OLD.insert_seq)
BEGIN
    SELECT RAISE(ABORT, 'logbook: session data is never deleted, except a purged session''s (a tombstone written in the same transaction)');
END;

DROP TRIGGER session_tags_no_delete;
CREATE TRIGGER session_tags_no_delete BEFORE DELETE ON session_tags
WHEN NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.session_id = OLD.session_id AND t.insert_seq = OLD.insert_seq)
BEGIN
    SELECT RAISE(ABORT, 'logbook: session tags are immutable, except a purged session''s (a tombstone written in the same transaction)');
END;

DROP TRIGGER session_refs_no_delete;
CREATE TRIGGER session_refs_no_delete BEFORE DELETE ON session_refs
WHEN NOT EXISTS (SELECT 1 FROM tombstones t JOIN sessions s ON s.session_id = t.session_id AND s.insert_seq = t.insert_seq
                 WHERE t.session_id = OLD.session_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: linked references are append-only, except a purged session''s (a tombstone written in the same transaction)');
END;

DROP TRIGGER idempotency_keys_no_delete;
CREATE TRIGGER idempotency_keys_no_delete BEFORE DELETE ON idempotency_keys
WHEN NOT EXISTS (SELECT 1 FROM tombstones t JOIN sessions s ON s.session_id = t.session_id AND s.insert_seq = t.insert_seq
                 WHERE t.session_id = OLD.session_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: idempotency keys are append-only, except a purged session''s (a tombstone written in the same transaction)');
END;

DROP TRIGGER runs_no_delete;
CREATE TRIGGER runs_no_delete BEFORE DELETE ON runs
WHEN NOT EXISTS (SELECT 1 FROM tombstones t JOIN sessions s ON s.session_id = t.session_id AND s.insert_seq = t.insert_seq
                 WHERE t.session_id = OLD.session_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: runs are never deleted, except a purged session''s (a tombstone written in the same transaction)');
END;

DROP TRIGGER session_budgets_no_delete;
CREATE TRIGGER session_budgets_no_delete BEFORE DELETE ON session_budgets
WHEN NOT EXISTS (SELECT 1 FROM tombstones t JOIN sessions s ON s.session_id = t.session_id AND s.insert_seq = t.insert_seq
                 WHERE t.session_id = OLD.session_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: budgets are never deleted, except a purged session''s (a tombstone written in the same transaction)');
END;

DROP TRIGGER session_snapshots_no_delete;
CREATE TRIGGER session_snapshots_no_delete BEFORE DELETE ON session_snapshots
WHEN NOT EXISTS (SELECT 1 FROM tombstones t JOIN sessions s ON s.session_id = t.session_id AND s.insert_seq = t.insert_seq
                 WHERE t.session_id = OLD.session_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: snapshots are immutable, except a purged session''s (a tombstone written in the same transaction)');
END;

DROP TRIGGER session_gates_no_delete;
CREATE TRIGGER session_gates_no_delete BEFORE DELETE ON session_gates
WHEN NOT EXISTS (SELECT 1 FROM tombstones t JOIN sessions s ON s.session_id = t.session_id AND s.insert_seq = t.insert_seq
                 WHERE t.session_id = OLD.session_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: gates are never deleted, except a purged session''s (a tombstone written in the same transaction)');
END;

-- Each purge with what it has removed so far: `done` once every session it
-- chose has its tombstone.
CREATE VIEW v_purges AS
SELECT p.purge_id, p.at_ms, p.actor_type, p.actor_id, p.filter,
       p.sessions AS sessions_chosen, p.events AS events_chosen, p.bytes AS bytes_chosen,
       count(t.session_id) AS sessions_purged,
       coalesce(sum(t.events), 0) AS events_purged,
       coalesce(sum(t.bytes), 0) AS bytes_purged,
       max(t.purged_at_ms) AS last_purged_at_ms,
       CASE WHEN count(t.session_id) >= p.sessions THEN 1 ELSE 0 END AS done
FROM purges p LEFT JOIN tombstones t ON t.purge_id = p.purge_id
GROUP BY p.purge_id;

-- A purge deletes a session's idempotency keys by session.
CREATE INDEX idempotency_keys_by_session ON idempotency_keys (session_id);
