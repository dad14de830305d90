-- V6 (PostgreSQL): idempotent replays say what the first attempt did (SPEC
-- §5, issue 13 §12), as migrations/sqlite/V6__replay_revisions.sql: the key
-- row records the rev its mutation left. (NULL only for keys recorded before
-- this version, which a PostgreSQL ledger never has: V1–V6 are applied
-- together.)
ALTER TABLE idempotency_keys ADD COLUMN rev BIGINT CHECK (rev IS NULL OR rev >= 1);
