-- V9: nothing changes on SQLite. PostgreSQL's V9 adds the server-side
-- event hash its one-statement writes use (docs/postgres.md, "One round
-- trip per write"); the two schemas keep the same versions.
SELECT 1;
