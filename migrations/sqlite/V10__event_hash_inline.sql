-- V10: nothing changes on SQLite. PostgreSQL's V10 rewrites its server-side
-- event hash as one expression (docs/schema.md, "The event hash on the
-- server"); the two schemas keep the same versions.
SELECT 1;
