-- V12 (PostgreSQL): `logbook_create_key_free`, so that a create with an
-- idempotency key can be one statement (docs/schema.md, "The create key on
-- the server (V12)").
--
-- Two creates with one key must not both insert. The transaction takes the
-- key's advisory lock (class 0x4C47424B, `LGBK`; key `hashtext` of the key's
-- SHA-256 hex) and then looks the key up, in a statement whose snapshot is
-- taken after the lock was granted. A single statement takes its snapshot
-- when it begins, before it could wait for that lock, so it cannot look the
-- key up itself: this VOLATILE function runs each of its queries with a
-- snapshot of its own (READ COMMITTED), so the look-up after the lock sees a
-- create that committed while the caller waited. It sets `lock_timeout`
-- first (for the caller's transaction, as `SET LOCAL` would), so the wait is
-- bounded by the caller's busy timeout. Built-in names are `pg_catalog`'s;
-- the ledger's tables resolve by the caller's search_path, as the calling
-- statement's do. Nothing changes on SQLite, whose single writer needs no
-- lock; its V12 is empty.

CREATE FUNCTION logbook_create_key_free(key_sha256 TEXT, lock_timeout_ms TEXT)
RETURNS BOOLEAN LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_ms, true);
    PERFORM pg_catalog.pg_advisory_xact_lock(1279738443, pg_catalog.hashtext(key_sha256));
    -- The key's rows by the primary key, each one's event by its id (a
    -- subquery per row: a join would let a planner without fresh statistics
    -- scan every `created` event instead).
    RETURN NOT EXISTS (
        SELECT 1 FROM idempotency_keys k
        WHERE k.key_sha256 OPERATOR(pg_catalog.=) logbook_create_key_free.key_sha256
          AND (SELECT e.seq FROM events e WHERE e.event_id OPERATOR(pg_catalog.=) k.event_id)
              OPERATOR(pg_catalog.=) 0);
END
$$;
