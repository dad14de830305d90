-- V8 (PostgreSQL): retention that cannot be bent by raw SQL, as
-- migrations/sqlite/V8__retention_hardened.sql (docs/schema.md,
-- "Retention"), types mapped as in V1.
--
-- Adapted:
-- - A tombstone is the purge: its AFTER INSERT trigger deletes the
--   session's rows in the same statement (V7's delete triggers, which
--   allow the deletes of a session tombstoned by this transaction, still
--   guard each one), so a tombstone can no longer be written without its
--   deletes, and a role that may not delete cannot write one.
-- - A purge and a create under its session serialize on the session's
--   row: the tombstone trigger takes the row FOR UPDATE before it looks
--   for live children, and a new session takes its parent FOR KEY SHARE
--   (which FOR UPDATE waits for); a live session's parent must be a
--   session, not a purged one's tombstone.
-- - Who purged: logbook sets `logbook.writer` (SET LOCAL, one transaction)
--   where it records a purge. Without it a `purges` row must say
--   actor_type 'sql', and its actor_id is the session's role; a tombstone
--   may not name a purge logbook recorded.
-- - `purge_ends` refuses TRUNCATE as every ledger table does.
--
-- Messages (SQLSTATE LB001; the same text as SQLite's).

CREATE TABLE purge_ends (
    purge_id    BIGINT PRIMARY KEY REFERENCES purges (purge_id),
    at_ms       BIGINT NOT NULL,
    outcome     TEXT COLLATE "C" NOT NULL CHECK (outcome IN ('done', 'superseded')),
    skipped     BIGINT NOT NULL CHECK (skipped >= 0)
);

CREATE TRIGGER purge_ends_no_update BEFORE UPDATE ON purge_ends
FOR EACH ROW EXECUTE FUNCTION logbook_refuse('logbook: purge records are immutable');
CREATE TRIGGER purge_ends_no_delete BEFORE DELETE ON purge_ends
FOR EACH ROW EXECUTE FUNCTION logbook_refuse('logbook: purge records are immutable');
CREATE TRIGGER purge_ends_no_truncate BEFORE TRUNCATE ON purge_ends
FOR EACH STATEMENT EXECUTE FUNCTION logbook_refuse('logbook: ledger tables are never truncated');

-- Whether this transaction is logbook's own recording of a purge.
CREATE FUNCTION logbook_is_writer() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT coalesce(current_setting('logbook.writer', true), '') <> ''
$$;

CREATE FUNCTION logbook_purges_actor() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.actor_type IS DISTINCT FROM 'sql' AND NOT logbook_is_writer() THEN
        RAISE EXCEPTION USING ERRCODE = 'LB001',
            MESSAGE = 'logbook: a purge record written by raw SQL has actor_type ''sql''; only logbook records a purge by the CLI, MCP or library',
            CONSTRAINT = TG_NAME, TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
    END IF;
    IF NEW.actor_type = 'sql' AND NEW.actor_id IS NULL THEN
        NEW.actor_id := session_user;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER purges_actor_checked BEFORE INSERT ON purges
FOR EACH ROW EXECUTE FUNCTION logbook_purges_actor();

-- The truth a tombstone tells (as V7), checked with the session's row
-- held FOR UPDATE; a session absent here entirely (a purge recorded in
-- another ledger) is accepted as it is.
CREATE OR REPLACE FUNCTION logbook_tombstones_truthful() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    last_id BIGINT;
    last_h BYTEA;
BEGIN
    IF NEW.tx_id IS DISTINCT FROM pg_current_xact_id() THEN
        RAISE EXCEPTION USING ERRCODE = 'LB001',
            MESSAGE = 'logbook: a tombstone must name an ended session with no live child, once, and match its title, status, times, event count and newest event',
            CONSTRAINT = TG_NAME, TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
    END IF;
    IF NOT logbook_is_writer()
       AND EXISTS (SELECT 1 FROM purges p WHERE p.purge_id = NEW.purge_id AND p.actor_type <> 'sql') THEN
        RAISE EXCEPTION USING ERRCODE = 'LB001',
            MESSAGE = 'logbook: raw SQL writes a tombstone under a purge id of its own (recorded with actor sql), never under a purge logbook recorded',
            CONSTRAINT = 'tombstones_raw_sql_own_purge', TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
    END IF;
    -- Any incarnation of the id: held until the transaction ends, so a
    -- create under it waits (FOR KEY SHARE) and is seen by the checks below.
    PERFORM 1 FROM sessions s WHERE s.session_id = NEW.session_id FOR UPDATE;
    IF FOUND THEN
        SELECT e.event_id, e.hash INTO last_id, last_h FROM events e
         WHERE e.session_id = NEW.session_id ORDER BY e.seq DESC LIMIT 1;
        IF NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = NEW.session_id
               AND s.insert_seq = NEW.insert_seq AND s.title = NEW.title AND s.status = NEW.status
               AND s.status IN ('completed', 'failed', 'cancelled')
               AND s.app IS NOT DISTINCT FROM NEW.app
               AND s.parent_session_id IS NOT DISTINCT FROM NEW.parent_session_id
               AND s.created_at_ms = NEW.created_at_ms
               AND s.ended_at_ms IS NOT DISTINCT FROM NEW.ended_at_ms)
           OR NEW.events IS DISTINCT FROM (SELECT count(*) FROM events e WHERE e.session_id = NEW.session_id)
           OR NEW.last_event_id IS DISTINCT FROM last_id
           OR NEW.last_hash IS DISTINCT FROM last_h
           OR EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session_id = NEW.session_id
               AND c.status IN ('pending', 'active', 'paused')) THEN
            RAISE EXCEPTION USING ERRCODE = 'LB001',
                MESSAGE = 'logbook: a tombstone must name an ended session with no live child, once, and match its title, status, times, event count and newest event',
                CONSTRAINT = TG_NAME, TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
        END IF;
    END IF;
    IF NEW.purge_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM purges p WHERE p.purge_id = NEW.purge_id) THEN
        INSERT INTO purges (purge_id, at_ms, actor_type, actor_id, filter, sessions, events, bytes)
        VALUES (NEW.purge_id, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, 'sql', session_user,
                '{"raw_sql":true}', 0, 0, 0);
        PERFORM setval(pg_get_serial_sequence('purges', 'purge_id'),
                       (SELECT max(p.purge_id) FROM purges p));
    END IF;
    RETURN NEW;
END
$$;

-- The deletes, children first, in the statement that wrote the tombstone.
CREATE FUNCTION logbook_tombstones_purge_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = NEW.session_id
                   AND s.insert_seq = NEW.insert_seq) THEN
        RETURN NULL;
    END IF;
    DELETE FROM idempotency_keys WHERE session_id = NEW.session_id;
    DELETE FROM session_snapshots WHERE session_id = NEW.session_id;
    DELETE FROM session_gates WHERE session_id = NEW.session_id;
    DELETE FROM session_leases WHERE session_id = NEW.session_id;
    DELETE FROM session_budgets WHERE session_id = NEW.session_id;
    DELETE FROM runs WHERE session_id = NEW.session_id;
    DELETE FROM session_refs WHERE session_id = NEW.session_id;
    DELETE FROM session_tags t USING sessions s WHERE s.insert_seq = NEW.insert_seq
       AND t.insert_seq = s.insert_seq AND t.created_at_ms = s.created_at_ms
       AND t.tag IN (SELECT json_array_elements_text(s.tags::json));
    DELETE FROM events WHERE session_id = NEW.session_id;
    DELETE FROM session_data WHERE insert_seq = NEW.insert_seq;
    DELETE FROM sessions WHERE insert_seq = NEW.insert_seq;
    RETURN NULL;
END
$$;

CREATE TRIGGER tombstones_purge_rows AFTER INSERT ON tombstones
FOR EACH ROW EXECUTE FUNCTION logbook_tombstones_purge_rows();

-- A session's parent: a session (held FOR KEY SHARE until the inserting
-- transaction ends, so a purge of it waits), or, for an ended session
-- only, a purged session's tombstone.
CREATE OR REPLACE FUNCTION logbook_sessions_parent_exists() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM sessions s WHERE s.session_id = NEW.parent_session_id FOR KEY SHARE;
    IF FOUND THEN
        RETURN NEW;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.session_id = NEW.parent_session_id) THEN
        RAISE EXCEPTION USING ERRCODE = 'LB001',
            MESSAGE = 'logbook: a session''s parent must be a session or a purged session''s tombstone',
            CONSTRAINT = TG_NAME, TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
    END IF;
    IF NEW.status IN ('pending', 'active', 'paused') THEN
        RAISE EXCEPTION USING ERRCODE = 'LB001',
            MESSAGE = 'logbook: a live session''s parent must be a session of this ledger, not a purged one',
            CONSTRAINT = 'sessions_live_parent', TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
    END IF;
    RETURN NEW;
END
$$;

DROP VIEW v_purges;
CREATE VIEW v_purges AS
SELECT p.purge_id, p.at_ms, p.actor_type, p.actor_id, p.filter,
       p.sessions AS sessions_chosen, p.events AS events_chosen, p.bytes AS bytes_chosen,
       count(t.session_id) AS sessions_purged,
       coalesce(sum(t.events), 0)::bigint AS events_purged,
       coalesce(sum(t.bytes), 0)::bigint AS bytes_purged,
       max(t.purged_at_ms) AS last_purged_at_ms,
       CASE WHEN count(t.session_id) >= p.sessions OR e.purge_id IS NOT NULL THEN 1 ELSE 0 END AS done,
       e.outcome AS outcome,
       e.at_ms AS ended_at_ms,
       e.skipped AS sessions_skipped
FROM purges p LEFT JOIN tombstones t ON t.purge_id = p.purge_id
LEFT JOIN purge_ends e ON e.purge_id = p.purge_id
GROUP BY p.purge_id, e.purge_id, e.outcome, e.at_ms, e.skipped;

CREATE INDEX tombstones_by_parent ON tombstones (parent_session_id, purge_id) WHERE parent_session_id IS NOT NULL;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION logbook_is_writer() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION logbook_purges_actor() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION logbook_tombstones_truthful() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION logbook_tombstones_purge_rows() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION logbook_sessions_parent_exists() SET search_path = %I, pg_temp', current_schema());
END
$$;
