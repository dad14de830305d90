-- V6: idempotent replays say what the first attempt did (SPEC §5, issue 13 §12).
--
-- A retry with the same idempotency key applies nothing again and answers
-- `"replayed":{"rev":R,"seq":S}`: the rev the first attempt left and the seq
-- of the event it wrote. The seq is the key's event's; the rev cannot be
-- derived from the timeline (one mutation may write several events), so the
-- key row records it when it is written. Keys recorded before this version
-- keep NULL: their replays report `"rev":null`.
ALTER TABLE idempotency_keys ADD COLUMN rev INTEGER CHECK (rev IS NULL OR rev >= 1);
