-- V12: nothing changes on SQLite. PostgreSQL's V12 adds the function that
-- lets a create with an idempotency key be one statement (docs/schema.md,
-- "The create key on the server (V12)"); the two schemas keep the same
-- versions.
SELECT 1;
