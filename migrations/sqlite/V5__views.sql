-- V5: views for operators and dashboards (issue 5 §1).
--
-- Plain views over the tables: SQLite flattens each into the query that
-- uses it, so a dashboard's WHERE and ORDER BY reach the base tables'
-- indexes (docs/schema.md lists which index serves which filter; a test
-- asserts the plans). Times are kept as epoch ms and also given as RFC 3339
-- UTC text for people reading them.

CREATE VIEW v_sessions AS
SELECT
    s.session_id,
    s.status,
    s.title,
    s.app,
    s.agent_id,
    s.route,
    s.stage,
    s.parent_session_id,
    s.tags,
    s.rev,
    s.input_tokens,
    s.output_tokens,
    s.input_tokens + s.output_tokens AS total_tokens,
    s.api_calls,
    s.duration_ms,
    s.final_result,
    s.end_reason,
    s.created_at_ms,
    s.updated_at_ms,
    s.ended_at_ms,
    coalesce(s.ended_at_ms, s.updated_at_ms) - s.created_at_ms AS elapsed_ms,
    (SELECT max(e.seq) + 1 FROM events e WHERE e.session_id = s.session_id) AS event_count,
    (SELECT e.type FROM events e WHERE e.session_id = s.session_id ORDER BY e.seq DESC LIMIT 1) AS last_event_type,
    (SELECT e.at_ms FROM events e WHERE e.session_id = s.session_id ORDER BY e.seq DESC LIMIT 1) AS last_event_at_ms,
    strftime('%Y-%m-%dT%H:%M:%fZ', s.created_at_ms / 1000.0, 'unixepoch') AS created_at,
    strftime('%Y-%m-%dT%H:%M:%fZ', s.updated_at_ms / 1000.0, 'unixepoch') AS updated_at,
    s.insert_seq
FROM sessions s;

CREATE VIEW v_events AS
SELECT
    e.event_id,
    e.session_id,
    e.seq,
    e.type,
    e.at_ms,
    strftime('%Y-%m-%dT%H:%M:%fZ', e.at_ms / 1000.0, 'unixepoch') AS at,
    e.actor_type,
    e.detail,
    e.data,
    e.run_id,
    s.title,
    s.app,
    s.agent_id,
    s.status AS session_status
FROM events e JOIN sessions s ON s.session_id = e.session_id;

-- Per app and UTC day: sessions created that day (with the tokens they
-- have used so far), and sessions that ended completed or failed that day.
CREATE VIEW v_daily AS
SELECT day, app,
       sum(created) AS sessions,
       sum(completed) AS completions,
       sum(failed) AS failures,
       sum(tokens) AS tokens
FROM (
    SELECT date(created_at_ms / 1000, 'unixepoch') AS day, app, 1 AS created,
           0 AS completed, 0 AS failed, input_tokens + output_tokens AS tokens
    FROM sessions
    UNION ALL
    SELECT date(ended_at_ms / 1000, 'unixepoch'), app, 0,
           status = 'completed', status = 'failed', 0
    FROM sessions WHERE ended_at_ms IS NOT NULL
)
GROUP BY day, app;

CREATE VIEW v_runs AS
SELECT
    r.run_id,
    r.session_id,
    r.status,
    r.input_tokens,
    r.output_tokens,
    r.input_tokens + r.output_tokens AS total_tokens,
    r.api_calls,
    r.turn_count,
    r.error_code,
    r.error_message,
    r.created_at_ms,
    r.started_at_ms,
    r.ended_at_ms,
    r.ended_at_ms - r.started_at_ms AS run_ms,
    strftime('%Y-%m-%dT%H:%M:%fZ', r.created_at_ms / 1000.0, 'unixepoch') AS created_at,
    s.title,
    s.app,
    s.agent_id,
    s.status AS session_status
FROM runs r JOIN sessions s ON s.session_id = r.session_id;
