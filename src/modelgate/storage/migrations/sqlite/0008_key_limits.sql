-- Per-key limits held by admission tickets (limits.key_limits): input + output tokens per rolling
-- minute and requests in flight at once. NULL: no such limit.
ALTER TABLE api_keys ADD COLUMN tpm INTEGER;
ALTER TABLE api_keys ADD COLUMN max_concurrency INTEGER;
