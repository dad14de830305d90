-- V3: runs (issue 4 §1; the AgentSessionManager seed) and budgets (issue 4
-- §5; the Amber seed's budget tracker).
--
-- A run is one execution inside a session: pending -> running -> completed |
-- failed | cancelled | timeout. Every run transition is also a session
-- mutation (the session's rev + 1 and one `run_*` event carrying `run_id`),
-- so the session's timeline and hash chain cover its runs.
--
-- Token counts and totals are integers in 0..=2^53-1 (9007199254740991), the
-- range every JSON reader (JavaScript included) holds exactly; logbook
-- refuses a write whose total would leave it, and the CHECKs below hold the
-- line against raw SQL too.
--
-- Status lists are `=` … `OR` chains, not `IN (…)` (see V1).

CREATE TABLE runs (
    -- Immutable insertion key: `run list` returns a session's runs in
    -- creation order by it.
    insert_seq      INTEGER PRIMARY KEY,
    run_id          TEXT NOT NULL UNIQUE
                    CHECK (length(run_id) = 20 AND run_id GLOB 'run_[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'),
    session_id      TEXT NOT NULL REFERENCES sessions (session_id),
    status          TEXT NOT NULL
                    CHECK (status = 'pending' OR status = 'running' OR status = 'completed'
                           OR status = 'failed' OR status = 'cancelled' OR status = 'timeout'),
    input           TEXT CHECK (input IS NULL OR (json_valid(input) AND json_type(input) = 'object')),
    output          TEXT CHECK (output IS NULL OR (json_valid(output) AND json_type(output) = 'object')),
    error_code      TEXT,
    error_message   TEXT,
    metadata        TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata) AND json_type(metadata) = 'object'),
    input_tokens    INTEGER NOT NULL DEFAULT 0 CHECK (input_tokens BETWEEN 0 AND 9007199254740991),
    output_tokens   INTEGER NOT NULL DEFAULT 0 CHECK (output_tokens BETWEEN 0 AND 9007199254740991),
    api_calls       INTEGER NOT NULL DEFAULT 0 CHECK (api_calls BETWEEN 0 AND 9007199254740991),
    turn_count      INTEGER NOT NULL DEFAULT 0 CHECK (turn_count BETWEEN 0 AND 9007199254740991),
    created_at_ms   INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    started_at_ms   INTEGER,
    ended_at_ms     INTEGER
) STRICT;

-- `run list SESSION` (creation order) and `run active SESSION`.
CREATE INDEX runs_by_session ON runs (session_id, insert_seq);

-- Invariant: at most one running run per session. Partial on a literal
-- status; logbook's statements on `runs` never bind `status`, so this index
-- never makes SQLite re-prepare them (see V1 on partial indexes).
CREATE UNIQUE INDEX runs_one_running_per_session ON runs (session_id) WHERE status = 'running';

-- Invariant: a run in a terminal status is frozen.
CREATE TRIGGER runs_terminal_frozen BEFORE UPDATE ON runs
WHEN OLD.status = 'completed' OR OLD.status = 'failed' OR OLD.status = 'cancelled' OR OLD.status = 'timeout'
BEGIN
    SELECT RAISE(ABORT, 'logbook: a run in a terminal status cannot be updated');
END;

-- Invariant: a run keeps its identity, its session and its creation time,
-- and its usage and turn count never go down.
CREATE TRIGGER runs_identity_kept BEFORE UPDATE ON runs
WHEN NEW.run_id IS NOT OLD.run_id OR NEW.session_id IS NOT OLD.session_id
  OR NEW.insert_seq IS NOT OLD.insert_seq OR NEW.created_at_ms IS NOT OLD.created_at_ms
  OR NEW.input_tokens < OLD.input_tokens OR NEW.output_tokens < OLD.output_tokens
  OR NEW.api_calls < OLD.api_calls OR NEW.turn_count < OLD.turn_count
BEGIN
    SELECT RAISE(ABORT, 'logbook: a run keeps its id, session and creation time, and its counters never decrease');
END;

-- Invariant: runs are never deleted or replaced.
CREATE TRIGGER runs_no_delete BEFORE DELETE ON runs
BEGIN
    SELECT RAISE(ABORT, 'logbook: runs are never deleted');
END;

CREATE TRIGGER runs_no_replace BEFORE INSERT ON runs
WHEN EXISTS (SELECT 1 FROM runs WHERE insert_seq = NEW.insert_seq OR run_id = NEW.run_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: a run cannot replace another run');
END;

-- Invariant: a run is created only in a live session, and only as pending.
CREATE TRIGGER runs_insert_live_session BEFORE INSERT ON runs
WHEN NEW.status IS NOT 'pending'
  OR NOT EXISTS (SELECT 1 FROM sessions WHERE session_id = NEW.session_id
                 AND (status = 'pending' OR status = 'active' OR status = 'paused'))
BEGIN
    SELECT RAISE(ABORT, 'logbook: a run is created pending, in a session that is pending, active or paused');
END;

-- One budget per session (Amber seed). Limits are NULL when not set. The
-- budget measures usage since its last reset: `base_*` hold the session's
-- usage at that reset (0 before any), so a reset re-arms the budget without
-- erasing the session's usage sums. `exceeded_at_ms` is set by the one write
-- that crossed a limit and cleared by a reset: while it is set, no later
-- write appends `budget_exceeded` again.
CREATE TABLE session_budgets (
    session_id          TEXT PRIMARY KEY REFERENCES sessions (session_id),
    max_tokens          INTEGER CHECK (max_tokens IS NULL OR max_tokens BETWEEN 0 AND 9007199254740991),
    max_api_calls       INTEGER CHECK (max_api_calls IS NULL OR max_api_calls BETWEEN 0 AND 9007199254740991),
    max_duration_ms     INTEGER CHECK (max_duration_ms IS NULL OR max_duration_ms BETWEEN 0 AND 9007199254740991),
    on_exceed           TEXT NOT NULL CHECK (on_exceed = 'pause' OR on_exceed = 'fail' OR on_exceed = 'warn'),
    base_tokens         INTEGER NOT NULL DEFAULT 0 CHECK (base_tokens >= 0),
    base_api_calls      INTEGER NOT NULL DEFAULT 0 CHECK (base_api_calls >= 0),
    base_duration_ms    INTEGER NOT NULL DEFAULT 0 CHECK (base_duration_ms >= 0),
    exceeded_at_ms      INTEGER,
    updated_at_ms       INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- Invariant: budgets are never deleted or replaced, and a terminal
-- session's budget is frozen with it.
CREATE TRIGGER session_budgets_no_delete BEFORE DELETE ON session_budgets
BEGIN
    SELECT RAISE(ABORT, 'logbook: budgets are never deleted');
END;

CREATE TRIGGER session_budgets_no_replace BEFORE INSERT ON session_budgets
WHEN EXISTS (SELECT 1 FROM session_budgets WHERE session_id = NEW.session_id)
BEGIN
    SELECT RAISE(ABORT, 'logbook: a budget cannot replace another budget');
END;

CREATE TRIGGER session_budgets_terminal_frozen BEFORE UPDATE ON session_budgets
WHEN (SELECT status FROM sessions WHERE session_id = OLD.session_id) = 'completed'
  OR (SELECT status FROM sessions WHERE session_id = OLD.session_id) = 'failed'
  OR (SELECT status FROM sessions WHERE session_id = OLD.session_id) = 'cancelled'
  OR NEW.session_id IS NOT OLD.session_id
BEGIN
    SELECT RAISE(ABORT, 'logbook: the budget of a session in a terminal status cannot be updated');
END;
