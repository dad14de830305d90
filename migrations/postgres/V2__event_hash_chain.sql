-- V2 (PostgreSQL): the hash chain over each session's events (issue 3 §2;
-- migrations/sqlite/V2__event_hash_chain.sql), and the transaction id the
-- exact global feed reads by (issue 15 §4, PostgreSQL only).
--
-- `hash` is SHA-256 over a canonical encoding of `prev_hash` (32 zero bytes
-- for seq 0) and the event's fields (docs/schema.md, "Hash chain"); logbook
-- computes it (`logbook::chain`), the trigger below checks the link. BLOB →
-- BYTEA.
--
-- Adapted: on SQLite this version also lets an UPDATE fill in the hash of a
-- row older than the chain (and logbook fills them while migrating). A
-- PostgreSQL ledger has no such rows — its V1 and V2 are applied in one
-- transaction, before any event exists — so `events_no_update` stays
-- unconditional here.

ALTER TABLE events ADD COLUMN prev_hash BYTEA CHECK (prev_hash IS NULL OR octet_length(prev_hash) = 32);
ALTER TABLE events ADD COLUMN hash BYTEA CHECK (hash IS NULL OR octet_length(hash) = 32);

-- The feed's horizon (PostgreSQL only; not in SQLite's schema or in any
-- view). An event_id drawn from a sequence becomes visible at COMMIT, so a
-- reader that resumes after "the largest event_id seen" skips an event whose
-- transaction drew a smaller id but committed later. Each event records the
-- id of the transaction that inserted it; a feed reader reads only events of
-- transactions below its snapshot's xmin (`pg_snapshot_xmin`: every
-- transaction below it has committed or aborted, so no event there can
-- still appear) and resumes from a cursor over (tx_id, event_id), in the
-- order the index below serves. Added here, after the hash columns, so that
-- the columns SQLite has keep SQLite's order and the extra one comes last.
ALTER TABLE events ADD COLUMN tx_id xid8 NOT NULL DEFAULT pg_current_xact_id();

-- The feed: events in (tx_id, event_id) order from a cursor.
CREATE INDEX events_by_tx ON events (tx_id, event_id);

-- A new event must also link to its session's chain: `prev_hash` is the
-- previous event's `hash` (32 zero bytes for seq 0) and `hash` is present.
-- Since seqs are contiguous, the previous event is the one with the max seq,
-- so one backward step of events_by_session_seq reads both.
-- PostgreSQL only: `tx_id` must be the inserting transaction's own id (an
-- older one would put the event below a horizon a feed reader has already
-- passed, and the reader would never see it).
CREATE OR REPLACE FUNCTION logbook_events_seq_contiguous() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    last_seq BIGINT;
    last_hash BYTEA;
BEGIN
    SELECT e.seq, e.hash INTO last_seq, last_hash FROM events e
     WHERE e.session_id = NEW.session_id ORDER BY e.seq DESC LIMIT 1;
    IF NEW.seq IS DISTINCT FROM coalesce(last_seq + 1, 0)
       OR NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = NEW.session_id)
       OR NEW.hash IS NULL
       OR NEW.prev_hash IS DISTINCT FROM coalesce(last_hash, decode(repeat('00', 32), 'hex')) THEN
        RAISE EXCEPTION USING ERRCODE = 'LB001',
            MESSAGE = 'logbook: an event''s seq must be its session''s previous max seq + 1, its prev_hash the hash of that previous event, its session must exist, and it may not replace another event',
            CONSTRAINT = TG_NAME, TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
    END IF;
    IF NEW.tx_id IS DISTINCT FROM pg_current_xact_id() THEN
        RAISE EXCEPTION USING ERRCODE = 'LB001',
            MESSAGE = 'logbook: an event''s tx_id must be the id of the transaction that inserts it',
            CONSTRAINT = TG_NAME, TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA;
    END IF;
    RETURN NEW;
END
$$;

-- CREATE OR REPLACE resets the function's settings: pin its search_path
-- again (see V1).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION logbook_events_seq_contiguous() SET search_path = %I, pg_temp', current_schema());
END
$$;
