-- V9 (PostgreSQL): the server computes an event's hash, so that a mutation
-- can be one statement (docs/postgres.md, "One round trip per write").
--
-- `logbook_event_hash` is the chain's hash (docs/schema.md, "Hash chain"):
-- SHA-256 over the domain tag, the previous hash and the hashed fields,
-- each field encoded as NULL 0x00, integer 0x01 + 8 bytes big-endian, text
-- 0x02 + 4-byte big-endian byte length + its UTF-8 bytes. A statement that
-- appends an event reads the previous hash and the next seq under the
-- session's row lock and hashes with this function; the insert trigger
-- still checks the link (V2), and `verify` recomputes every hash on the
-- client, so a difference between the two encodings cannot go unseen.
-- Bytes are written with decode(…, 'hex'), whose reading does not depend on
-- standard_conforming_strings. Nothing else changes; SQLite's V9 is empty.

CREATE FUNCTION logbook_hash_field(t TEXT) RETURNS BYTEA
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN t IS NULL THEN decode('00', 'hex')
           ELSE decode('02', 'hex') || int4send(octet_length(convert_to(t, 'UTF8')))
                || convert_to(t, 'UTF8') END
$$;

CREATE FUNCTION logbook_event_hash(prev BYTEA, session_id TEXT, seq BIGINT, type TEXT,
    at_ms BIGINT, actor_type TEXT, detail TEXT, data TEXT, run_id TEXT) RETURNS BYTEA
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT sha256(convert_to(E'logbook.event.v1\n', 'UTF8') || prev
        || logbook_hash_field(session_id) || decode('01', 'hex') || int8send(seq)
        || logbook_hash_field(type) || decode('01', 'hex') || int8send(at_ms)
        || logbook_hash_field(actor_type) || logbook_hash_field(detail)
        || logbook_hash_field(data) || logbook_hash_field(run_id))
$$;

-- Pin the functions' search_path, as every function of the schema (V1).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION logbook_hash_field(TEXT) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION logbook_event_hash(BYTEA, TEXT, BIGINT, TEXT, BIGINT, TEXT, TEXT, TEXT, TEXT) SET search_path = %I, pg_temp', current_schema());
END
$$;
