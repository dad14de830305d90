#!/usr/bin/env bash
# Where a PostgreSQL write's time goes (BENCHMARKS.md, "A quiet sitting, and
# where the floor is"): on a throwaway database of the .ci/pg server,
#   1. the server time of a keyed checkpoint's one statement (300
#      checkpoints through one Ledger, examples/keyed_checkpoints.rs, with
#      `log_min_duration_statement = 0`: bind and execute p50/p90 from the
#      server's log);
#   2. how many of the session's UPDATEs were HOT (pg_stat_user_tables);
#   3. a bare UPDATE of one session row with its commit (pgbench -M prepared,
#      one client, 3,000 transactions, three runs);
#   4. the server-side event hash: V9's function (recreated here under
#      another name, as V9 wrote it) against today's, 20,000 hashes each.
# With --explain, step 1 runs under auto_explain (log_analyze, log_triggers)
# and the last plan of the statement is printed.
#
#   cargo build --release --bin logbook --example keyed_checkpoints
#   bash .ci/pg bash benches/pg_floor.sh [--explain]
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LOGBOOK_TEST_PG:?run under bash .ci/pg}"
bin=${LOGBOOK_BIN:-target/release/logbook}
writes=${LOGBOOK_WRITES_BIN:-target/release/examples/keyed_checkpoints}
explain=${1:-}
log=$(dirname "$LOGBOOK_TEST_PGDATA")/server.log
psql() { "$LOGBOOK_TEST_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
db=floor_$$
url=${LOGBOOK_TEST_PG%/postgres}/$db
psql "$LOGBOOK_TEST_PG" -c "CREATE DATABASE $db"
trap 'psql "$LOGBOOK_TEST_PG" -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true' EXIT
sid=$("$bin" --db "$url" session create --title floor --json |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["data"]["session_id"])')
for i in $(seq 1 20); do "$bin" --db "$url" session create --title "other $i" >/dev/null; done

if [ "$explain" = --explain ]; then
  psql "$url" -c "ALTER DATABASE $db SET session_preload_libraries = 'auto_explain'" \
    -c "ALTER DATABASE $db SET auto_explain.log_min_duration = 0" \
    -c "ALTER DATABASE $db SET auto_explain.log_analyze = on" \
    -c "ALTER DATABASE $db SET auto_explain.log_triggers = on"
else
  psql "$url" -c "ALTER DATABASE $db SET log_min_duration_statement = 0"
fi
from=$(wc -l < "$log")
"$writes" "$url" "$sid" 300
sleep 1
if [ "$explain" = --explain ]; then
  tail -n +"$from" "$log" | awk '/Query Text: WITH u AS \(UPDATE sessions/ {buf=""; on=1}
    on {buf = buf $0 "\n"} /Trigger for constraint idempotency_keys_event_id_fkey/ && on {last=buf; on=0}
    END {printf "%s", last}'
else
  echo "### 1. a keyed checkpoint's statement on the server (300 writes, ms)"
  for phase in bind execute; do
    tail -n +"$from" "$log" | grep -F "logbook_event_hash" | grep -E "duration: [0-9.]+ ms  $phase " |
      sed -E 's/.*duration: ([0-9.]+) ms.*/\1/' | sort -n |
      awk -v p="$phase" '{a[NR]=$1} END {printf "%s: n %d, p50 %s, p90 %s\n", p, NR, a[int(NR/2)], a[int(NR*0.9)]}'
  done
fi
psql "$url" -c "ALTER DATABASE $db RESET ALL"

echo "### 2. HOT updates of sessions"
psql "$url" -Atc "SELECT 'updates ' || n_tup_upd || ', HOT ' || n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'sessions'"

echo "### 3. a bare UPDATE of one session row with its commit (pgbench, 1 client, 3,000)"
sql=$(mktemp)
echo "UPDATE sessions SET rev = rev + 1, updated_at_ms = updated_at_ms + 1 WHERE session_id = '$sid';" > "$sql"
pg=$(python3 -c 'import os, urllib.parse as u; p = u.urlparse(os.environ["LOGBOOK_TEST_PG"]); print(p.hostname, p.port, p.username, u.unquote(p.password or ""))')
read -r host port user pass <<< "$pg"
for i in 1 2 3; do
  PGPASSWORD=$pass "$LOGBOOK_TEST_PG_BIN/pgbench" -h "$host" -p "$port" -U "$user" -n -M prepared \
    -f "$sql" -t 3000 -c 1 "$db" 2>/dev/null | grep "latency average"
done
rm -f "$sql"

echo "### 4. the server-side event hash, 20,000 calls (ms)"
psql "$url" <<'SQL'
CREATE SCHEMA v9;
CREATE FUNCTION v9.hash_field(t TEXT) RETURNS BYTEA LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN t IS NULL THEN decode('00', 'hex')
           ELSE decode('02', 'hex') || int4send(octet_length(convert_to(t, 'UTF8')))
                || convert_to(t, 'UTF8') END $$;
CREATE FUNCTION v9.event_hash(prev BYTEA, session_id TEXT, seq BIGINT, type TEXT,
    at_ms BIGINT, actor_type TEXT, detail TEXT, data TEXT, run_id TEXT) RETURNS BYTEA
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT sha256(convert_to(E'logbook.event.v1\n', 'UTF8') || prev
        || v9.hash_field(session_id) || decode('01', 'hex') || int8send(seq)
        || v9.hash_field(type) || decode('01', 'hex') || int8send(at_ms)
        || v9.hash_field(actor_type) || v9.hash_field(detail)
        || v9.hash_field(data) || v9.hash_field(run_id)) $$;
ALTER FUNCTION v9.hash_field(TEXT) SET search_path = public, pg_temp;
ALTER FUNCTION v9.event_hash(BYTEA, TEXT, BIGINT, TEXT, BIGINT, TEXT, TEXT, TEXT, TEXT) SET search_path = public, pg_temp;
\timing on
SELECT count(v9.event_hash('\x00'::bytea, 'ses_0123456789abcdef', g, 'checkpoint', 1782040000000, 'lib', 'note', '{"step":"s"}', NULL)) AS v9 FROM generate_series(1, 20000) g;
SELECT count(logbook_event_hash('\x00'::bytea, 'ses_0123456789abcdef', g, 'checkpoint', 1782040000000, 'lib', 'note', '{"step":"s"}', NULL::text)) AS today FROM generate_series(1, 20000) g;
SELECT v9.event_hash('\x00'::bytea, 's', 1, 't', 2, 'lib', NULL, 'd', NULL) = logbook_event_hash('\x00'::bytea, 's', 1, 't', 2, 'lib', NULL, 'd', NULL::text) AS same;
SQL
