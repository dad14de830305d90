-- V2: a tamper-evident hash chain over each session's events (issue 3 §2).
--
-- `hash` is SHA-256 over a canonical byte encoding of the previous event's
-- hash (`prev_hash`; 32 zero bytes for seq 0) and this event's fields; the
-- encoding is documented in docs/schema.md ("Hash chain") and implemented by
-- `logbook::chain`. SQLite has no SHA-256 of its own, so logbook computes the
-- hashes and fills the rows that existed before this migration in the same
-- transaction that adds the columns (`store::migrate`).
--
-- The chain makes edits evident, not impossible: whoever can write the file
-- can drop these triggers and recompute every hash after an edit. `logbook
-- verify` reports each session's head hash; a head recorded elsewhere
-- anchors the chain against that.

ALTER TABLE events ADD COLUMN prev_hash BLOB CHECK (prev_hash IS NULL OR length(prev_hash) = 32);
ALTER TABLE events ADD COLUMN hash BLOB CHECK (hash IS NULL OR length(hash) = 32);

-- Still no UPDATE, with one exception: filling in the hash of a row that
-- has none, changing nothing else. Only rows older than this migration ever
-- lack one (new rows must carry it, below), and the migration fills them.
DROP TRIGGER events_no_update;
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
WHEN OLD.hash IS NOT NULL OR NEW.hash IS NULL OR NEW.prev_hash IS NULL
  OR NEW.event_id IS NOT OLD.event_id OR NEW.session_id IS NOT OLD.session_id
  OR NEW.seq IS NOT OLD.seq OR NEW.type IS NOT OLD.type OR NEW.at_ms IS NOT OLD.at_ms
  OR NEW.actor_type IS NOT OLD.actor_type OR NEW.detail IS NOT OLD.detail
  OR NEW.data IS NOT OLD.data OR NEW.run_id IS NOT OLD.run_id
BEGIN
    SELECT RAISE(ABORT, 'logbook: events are append-only; UPDATE is not allowed');
END;

-- A new event must also link to its session's chain: `prev_hash` is the
-- previous event's `hash` (32 zero bytes for seq 0) and `hash` is present.
-- (Whether `hash` is the right digest is for `logbook verify` to say: SQL
-- cannot compute SHA-256.)
DROP TRIGGER events_seq_contiguous;
CREATE TRIGGER events_seq_contiguous BEFORE INSERT ON events
WHEN NEW.seq IS NOT (SELECT coalesce(max(seq) + 1, 0) FROM events WHERE session_id = NEW.session_id)
  OR NOT EXISTS (SELECT 1 FROM sessions WHERE session_id = NEW.session_id)
  OR EXISTS (SELECT 1 FROM events WHERE event_id = NEW.event_id)
  OR NEW.hash IS NULL
  OR NEW.prev_hash IS NOT coalesce((SELECT hash FROM events WHERE session_id = NEW.session_id AND seq = NEW.seq - 1), zeroblob(32))
BEGIN
    SELECT RAISE(ABORT, 'logbook: an event''s seq must be its session''s previous max seq + 1, its prev_hash the hash of that previous event, its session must exist, and it may not replace another event');
END;
