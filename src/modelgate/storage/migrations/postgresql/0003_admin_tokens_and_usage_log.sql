-- Admin token lifecycle: a label, what may be shown of the token (prefix and last four
-- characters), which token issued it, an optional expiry, revocation, and when it was last used
-- (written at most once a minute per token, so authentication stays a read).
ALTER TABLE admin_tokens
    ADD COLUMN name TEXT NOT NULL DEFAULT '',
    ADD COLUMN prefix TEXT NOT NULL DEFAULT '',
    ADD COLUMN last4 TEXT NOT NULL DEFAULT '',
    ADD COLUMN created_by TEXT,
    ADD COLUMN expires_at DOUBLE PRECISION,
    ADD COLUMN revoked_at DOUBLE PRECISION,
    ADD COLUMN last_used_at DOUBLE PRECISION;
CREATE INDEX admin_tokens_account ON admin_tokens(account_id);

-- The usage log pages newest first within a key's or an account's months, and a key's last use
-- is the latest start in its latest month: both become index seeks once created_at ends the
-- two usage indexes (entries grow by 8 bytes, no index is added to the write path).
DROP INDEX usage_key_month;
CREATE INDEX usage_key_month ON usage_records(key_id, month, created_at);
DROP INDEX usage_account_month;
CREATE INDEX usage_account_month ON usage_records(account_id, month, created_at);
