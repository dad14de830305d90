-- V5 (PostgreSQL): views for operators and dashboards (issue 5 §1), as
-- migrations/sqlite/V5__views.sql: the same names, the same columns in the
-- same order, the same values.
--
-- SQLite's functions mapped:
-- - strftime('%Y-%m-%dT%H:%M:%fZ', ms / 1000.0, 'unixepoch') → to_char of
--   TIMESTAMP 'epoch' + ms milliseconds (integer arithmetic: exact to the ms,
--   and the same text, e.g. 2024-05-01T12:00:00.250Z, whatever the session's
--   TimeZone);
-- - date(ms / 1000, 'unixepoch') → to_char(…, 'YYYY-MM-DD') of the whole
--   seconds (`/` truncates toward zero in both);
-- - `status = 'completed'` as 0/1 → a boolean cast to integer;
-- - sum() of BIGINTs is NUMERIC on PostgreSQL: cast back to BIGINT, the
--   integer SQLite's sum() gives (both fail on overflow rather than round).

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
    to_char(TIMESTAMP 'epoch' + s.created_at_ms * INTERVAL '1 millisecond', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at,
    to_char(TIMESTAMP 'epoch' + s.updated_at_ms * INTERVAL '1 millisecond', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS updated_at,
    s.insert_seq
FROM sessions s;

CREATE VIEW v_events AS
SELECT
    e.event_id,
    e.session_id,
    e.seq,
    e.type,
    e.at_ms,
    to_char(TIMESTAMP 'epoch' + e.at_ms * INTERVAL '1 millisecond', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS at,
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
       sum(created)::bigint AS sessions,
       sum(completed)::bigint AS completions,
       sum(failed)::bigint AS failures,
       sum(tokens)::bigint AS tokens
FROM (
    SELECT to_char(TIMESTAMP 'epoch' + (created_at_ms / 1000) * INTERVAL '1 second', 'YYYY-MM-DD') AS day,
           app, 1 AS created, 0 AS completed, 0 AS failed, input_tokens + output_tokens AS tokens
    FROM sessions
    UNION ALL
    SELECT to_char(TIMESTAMP 'epoch' + (ended_at_ms / 1000) * INTERVAL '1 second', 'YYYY-MM-DD'),
           app, 0, (status = 'completed')::integer, (status = 'failed')::integer, 0
    FROM sessions WHERE ended_at_ms IS NOT NULL
) AS d
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
    to_char(TIMESTAMP 'epoch' + r.created_at_ms * INTERVAL '1 millisecond', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at,
    s.title,
    s.app,
    s.agent_id,
    s.status AS session_status
FROM runs r JOIN sessions s ON s.session_id = r.session_id;
