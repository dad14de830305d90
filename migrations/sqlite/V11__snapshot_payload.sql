-- V11: a snapshot may carry a binary payload beside its JSON state
-- (docs/design.md, "Snapshots"; docs/schema.md, `session_snapshots`).
--
-- Serialized bytes a caller must get back exactly (a LangGraph checkpoint's
-- msgpack, docs/python.md) were kept as hex inside `state`: twice their size,
-- and under the state's 256 KiB cap. `payload` keeps them as they are, up to
-- 16 MiB; the checkpoint event's data records their size and SHA-256
-- (`snapshot.payload_bytes`, `snapshot.payload_sha256`), so the hash chain
-- covers them as it covers `state`. The snapshot triggers of V4 and V8 (never
-- changed, removed or replaced) hold for the new column too. Rows written
-- before V11 have no payload (NULL).
ALTER TABLE session_snapshots ADD COLUMN payload BLOB
    CHECK (payload IS NULL OR length(payload) <= 16777216);
