-- One key's usage log (GET /v1/key/usage, the admin log filtered by key) pages newest first by
-- (created_at, request_id) from an index in that order, whatever the months: the index by
-- (key_id, month, created_at) made a page of a busy key sort all of that key's records.
CREATE INDEX usage_key_created ON usage_records(key_id, created_at, request_id);
