-- V8: retention that cannot be bent by raw SQL (docs/schema.md, "Retention").
--
-- A tombstone is the purge: writing it deletes its session's rows in the
-- same statement (`tombstones_purge_rows`, AFTER INSERT), so no tombstone
-- outlives the statement that wrote it with its session still there, and
-- the delete triggers of V7 (which allow the deletes a tombstone of the
-- session's current incarnation covers) hold only inside that statement:
-- once it ends the session row is gone, and a later transaction finds no
-- incarnation to delete. (A tombstone written by raw SQL before V8 without
-- its deletes still exists beside its session; `doctor` reports it and a
-- purge skips it.)
--
-- A tombstone of a session that does not exist here at all records a
-- purge made in another ledger (an import of a moved ledger's audit
-- trail): it deletes nothing.
--
-- Who purged: logbook's own connections define the SQL function
-- `logbook_writer()`. A `purges` row that claims the CLI, MCP or the
-- library as its actor needs it (raw SQL records actor `sql`), and raw SQL
-- may not write a tombstone under a purge that logbook recorded.
--
-- A purge's end (`purge_ends`, immutable): a purge that ran to its end is
-- done even when another purge removed some of the sessions it chose, and
-- an unfinished purge whose filter no longer chooses anything is closed as
-- superseded; `v_purges.done` reads both.
--
-- No conflict clause replaces a row: SQLite's REPLACE resolution deletes
-- the conflicting row without firing delete triggers (unless the
-- connection turned recursive_triggers on), so every unique key of a
-- ledger table has a BEFORE INSERT trigger refusing a taken key. V1–V7
-- cover the primary keys and most unique keys; these add the two left:
-- one running run per session, and one snapshot per checkpoint seq.
--
-- A live session's parent is a session here (not a purged one's
-- tombstone): a purged session never gains a live child.

CREATE TABLE purge_ends (
    purge_id    INTEGER PRIMARY KEY REFERENCES purges (purge_id),
    at_ms       INTEGER NOT NULL,
    outcome     TEXT NOT NULL CHECK (outcome = 'done' OR outcome = 'superseded'),
    -- Sessions it chose but did not purge: removed meanwhile by another
    -- purge, given a live descendant, or held by a stray tombstone.
    skipped     INTEGER NOT NULL CHECK (skipped >= 0)
) STRICT;

CREATE TRIGGER purge_ends_no_update BEFORE UPDATE ON purge_ends
BEGIN
    SELECT RAISE(ABORT, 'logbook: purge records are immutable');
END;

CREATE TRIGGER purge_ends_no_delete BEFORE DELETE ON purge_ends
BEGIN
    SELECT RAISE(ABORT, 'logbook: purge records are immutable');
END;

CREATE TRIGGER purge_ends_no_replace BEFORE INSERT ON purge_ends
WHEN EXISTS (SELECT 1 FROM purge_ends WHERE purge_id = NEW.purge_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: purge records are immutable');
END;

CREATE TRIGGER purges_actor_checked BEFORE INSERT ON purges
WHEN NEW.actor_type IS NOT 'sql'
  AND NOT EXISTS (SELECT 1 FROM pragma_function_list WHERE name = 'logbook_writer')
BEGIN
    SELECT RAISE(ABORT, 'logbook: a purge record written by raw SQL has actor_type ''sql''; only logbook records a purge by the CLI, MCP or library');
END;

CREATE TRIGGER tombstones_raw_sql_own_purge BEFORE INSERT ON tombstones
WHEN NOT EXISTS (SELECT 1 FROM pragma_function_list WHERE name = 'logbook_writer')
  AND EXISTS (SELECT 1 FROM purges WHERE purge_id = NEW.purge_id AND actor_type IS NOT 'sql')
BEGIN
    SELECT RAISE(ABORT, 'logbook: raw SQL writes a tombstone under a purge id of its own (recorded with actor sql), never under a purge logbook recorded');
END;

-- The truth a tombstone tells: as V7, and a session absent here entirely
-- (a purge recorded in another ledger) is accepted as it is.
DROP TRIGGER tombstones_truthful;
CREATE TRIGGER tombstones_truthful BEFORE INSERT ON tombstones
WHEN EXISTS (SELECT 1 FROM tombstones WHERE session_id = NEW.session_id AND insert_seq = NEW.insert_seq)
  OR (EXISTS (SELECT 1 FROM sessions WHERE session_id = NEW.session_id)
  AND (NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = NEW.session_id
      AND s.insert_seq = NEW.insert_seq AND s.title = NEW.title AND s.status = NEW.status
      AND (s.status = 'completed' OR s.status = 'failed' OR s.status = 'cancelled')
      AND s.app IS NEW.app AND s.parent_session_id IS NEW.parent_session_id
      AND s.created_at_ms = NEW.created_at_ms AND s.ended_at_ms IS NEW.ended_at_ms)
  OR NEW.events IS NOT (SELECT count(*) FROM events WHERE session_id = NEW.session_id)
  OR NEW.last_event_id IS NOT (SELECT event_id FROM events WHERE session_id = NEW.session_id ORDER BY seq DESC LIMIT 1)
  OR NEW.last_hash IS NOT (SELECT hash FROM events WHERE session_id = NEW.session_id ORDER BY seq DESC LIMIT 1)
  OR EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session_id = NEW.session_id
      AND (c.status = 'pending' OR c.status = 'active' OR c.status = 'paused'))))
BEGIN
    SELECT RAISE(ABORT, 'logbook: a tombstone must name an ended session with no live child, once, and match its title, status, times, event count and newest event');
END;

-- The deletes, children first, in the statement that wrote the tombstone.
CREATE TRIGGER tombstones_purge_rows AFTER INSERT ON tombstones
WHEN EXISTS (SELECT 1 FROM sessions WHERE session_id = NEW.session_id AND insert_seq = NEW.insert_seq)
BEGIN
    DELETE FROM idempotency_keys WHERE session_id = NEW.session_id;
    DELETE FROM session_snapshots WHERE session_id = NEW.session_id;
    DELETE FROM session_gates WHERE session_id = NEW.session_id;
    DELETE FROM session_leases WHERE session_id = NEW.session_id;
    DELETE FROM session_budgets WHERE session_id = NEW.session_id;
    DELETE FROM runs WHERE session_id = NEW.session_id;
    DELETE FROM session_refs WHERE session_id = NEW.session_id;
    DELETE FROM session_tags WHERE insert_seq = NEW.insert_seq
        AND tag IN (SELECT value FROM json_each((SELECT tags FROM sessions WHERE insert_seq = NEW.insert_seq)))
        AND created_at_ms = (SELECT created_at_ms FROM sessions WHERE insert_seq = NEW.insert_seq);
    DELETE FROM events WHERE session_id = NEW.session_id;
    DELETE FROM session_data WHERE insert_seq = NEW.insert_seq;
    DELETE FROM sessions WHERE insert_seq = NEW.insert_seq;
END;

-- A live session's parent is a session of this ledger.
CREATE TRIGGER sessions_live_parent BEFORE INSERT ON sessions
WHEN NEW.parent_session_id IS NOT NULL
  AND (NEW.status = 'pending' OR NEW.status = 'active' OR NEW.status = 'paused')
  AND NOT EXISTS (SELECT 1 FROM sessions WHERE session_id = NEW.parent_session_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: a live session''s parent must be a session of this ledger, not a purged one');
END;

CREATE TRIGGER runs_one_running_no_replace BEFORE INSERT ON runs
WHEN NEW.status = 'running'
  AND EXISTS (SELECT 1 FROM runs WHERE session_id = NEW.session_id AND status = 'running')
BEGIN
    SELECT RAISE(ABORT, 'logbook: a run cannot replace another run');
END;

CREATE TRIGGER session_snapshots_no_replace BEFORE INSERT ON session_snapshots
WHEN EXISTS (SELECT 1 FROM session_snapshots WHERE session_id = NEW.session_id AND seq = NEW.seq)
BEGIN
    SELECT RAISE(ABORT, 'logbook: a snapshot belongs to an existing checkpoint event and cannot replace another');
END;

DROP VIEW v_purges;
CREATE VIEW v_purges AS
SELECT p.purge_id, p.at_ms, p.actor_type, p.actor_id, p.filter,
       p.sessions AS sessions_chosen, p.events AS events_chosen, p.bytes AS bytes_chosen,
       count(t.session_id) AS sessions_purged,
       coalesce(sum(t.events), 0) AS events_purged,
       coalesce(sum(t.bytes), 0) AS bytes_purged,
       max(t.purged_at_ms) AS last_purged_at_ms,
       CASE WHEN count(t.session_id) >= p.sessions OR e.purge_id IS NOT NULL THEN 1 ELSE 0 END AS done,
       e.outcome AS outcome,
       e.at_ms AS ended_at_ms,
       e.skipped AS sessions_skipped
FROM purges p LEFT JOIN tombstones t ON t.purge_id = p.purge_id
LEFT JOIN purge_ends e ON e.purge_id = p.purge_id
GROUP BY p.purge_id;

-- Tombstones by parent: `show` and `tree` of a parent count its purged
-- children.
CREATE INDEX tombstones_by_parent ON tombstones (parent_session_id, purge_id) WHERE parent_session_id IS NOT NULL;
