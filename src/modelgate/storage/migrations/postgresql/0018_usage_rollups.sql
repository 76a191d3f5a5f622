-- Issue #34 (a long history): usage rollups kept on write, and indexes for the usage log's pages.
--
-- usage_rollups: per key, UTC day, model, endpoint and status; usage_account_rollups: the same per
-- account (every key of it); usage_key_month_rollups: per key and month (top keys). Reports read these instead of the records: an overview, a daily chart
-- or a top-keys list reads days x models (x endpoints x statuses) rows, not the month's records.
-- Both are kept by the trigger below, in the transaction that inserts the record (the ledger
-- batch, modelgate_ledger, unchanged), so they always equal a scan of the records ever written;
-- deleting records (usage.retention_days) leaves them. `modelgate usage rebuild-rollups` recomputes
-- both from the records that remain.
--
-- Locking: every rollup row belongs to one account, and a ledger batch holds the advisory lock of
-- each account it touches (taken first, in one global order), so two batches never wait on each
-- other's rollup rows in opposite orders.
CREATE TABLE usage_rollups (
    key_id                TEXT NOT NULL,
    day                   TEXT NOT NULL,
    model                 TEXT NOT NULL,
    endpoint              TEXT NOT NULL,
    status                TEXT NOT NULL,
    account_id            BIGINT NOT NULL,
    month                 TEXT NOT NULL,
    requests              BIGINT NOT NULL DEFAULT 0,
    input_tokens          BIGINT NOT NULL DEFAULT 0,
    output_tokens         BIGINT NOT NULL DEFAULT 0,
    cache_creation_tokens BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens     BIGINT NOT NULL DEFAULT 0,
    cache_write_1h_tokens BIGINT NOT NULL DEFAULT 0,
    web_search_requests   BIGINT NOT NULL DEFAULT 0,
    charged_uc            BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, day, model, endpoint, status)
);
CREATE INDEX usage_rollups_month ON usage_rollups(month, account_id, key_id);

CREATE TABLE usage_account_rollups (
    account_id            BIGINT NOT NULL,
    day                   TEXT NOT NULL,
    model                 TEXT NOT NULL,
    endpoint              TEXT NOT NULL,
    status                TEXT NOT NULL,
    month                 TEXT NOT NULL,
    requests              BIGINT NOT NULL DEFAULT 0,
    input_tokens          BIGINT NOT NULL DEFAULT 0,
    output_tokens         BIGINT NOT NULL DEFAULT 0,
    cache_creation_tokens BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens     BIGINT NOT NULL DEFAULT 0,
    cache_write_1h_tokens BIGINT NOT NULL DEFAULT 0,
    web_search_requests   BIGINT NOT NULL DEFAULT 0,
    charged_uc            BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, day, model, endpoint, status)
);
CREATE INDEX usage_account_rollups_month ON usage_account_rollups(month);

-- Per key and month: what top keys ranks (one row per key active in the month).
CREATE TABLE usage_key_month_rollups (
    key_id     TEXT NOT NULL,
    month      TEXT NOT NULL,
    account_id BIGINT NOT NULL,
    requests   BIGINT NOT NULL DEFAULT 0,
    tokens     BIGINT NOT NULL DEFAULT 0,
    charged_uc BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, month)
);
CREATE INDEX usage_key_month_rollups_month ON usage_key_month_rollups(month, account_id);

CREATE FUNCTION modelgate_usage_rollup() RETURNS TRIGGER LANGUAGE plpgsql AS $$
DECLARE
    usage_day TEXT := to_char(to_timestamp(NEW.created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD');
BEGIN
    INSERT INTO usage_rollups AS r (key_id, day, model, endpoint, status, account_id, month,
        requests, input_tokens, output_tokens, cache_creation_tokens,
        cache_read_tokens, cache_write_1h_tokens, web_search_requests, charged_uc)
        VALUES (NEW.key_id, usage_day, NEW.model, NEW.endpoint, NEW.status, NEW.account_id,
            NEW.month, 1, NEW.input_tokens, NEW.output_tokens, NEW.cache_creation_tokens, NEW.cache_read_tokens,
            NEW.cache_write_1h_tokens, NEW.web_search_requests, NEW.charged_uc)
    ON CONFLICT (key_id, day, model, endpoint, status) DO UPDATE SET
        requests = r.requests + 1,
        input_tokens = r.input_tokens + EXCLUDED.input_tokens,
        output_tokens = r.output_tokens + EXCLUDED.output_tokens,
        cache_creation_tokens = r.cache_creation_tokens + EXCLUDED.cache_creation_tokens,
        cache_read_tokens = r.cache_read_tokens + EXCLUDED.cache_read_tokens,
        cache_write_1h_tokens = r.cache_write_1h_tokens + EXCLUDED.cache_write_1h_tokens,
        web_search_requests = r.web_search_requests + EXCLUDED.web_search_requests,
        charged_uc = r.charged_uc + EXCLUDED.charged_uc;
    INSERT INTO usage_account_rollups AS r (account_id, day, model, endpoint, status, month,
        requests, input_tokens, output_tokens, cache_creation_tokens,
        cache_read_tokens, cache_write_1h_tokens, web_search_requests, charged_uc)
        VALUES (NEW.account_id, usage_day, NEW.model, NEW.endpoint, NEW.status, NEW.month, 1,
            NEW.input_tokens, NEW.output_tokens, NEW.cache_creation_tokens, NEW.cache_read_tokens,
            NEW.cache_write_1h_tokens, NEW.web_search_requests, NEW.charged_uc)
    ON CONFLICT (account_id, day, model, endpoint, status) DO UPDATE SET
        requests = r.requests + 1,
        input_tokens = r.input_tokens + EXCLUDED.input_tokens,
        output_tokens = r.output_tokens + EXCLUDED.output_tokens,
        cache_creation_tokens = r.cache_creation_tokens + EXCLUDED.cache_creation_tokens,
        cache_read_tokens = r.cache_read_tokens + EXCLUDED.cache_read_tokens,
        cache_write_1h_tokens = r.cache_write_1h_tokens + EXCLUDED.cache_write_1h_tokens,
        web_search_requests = r.web_search_requests + EXCLUDED.web_search_requests,
        charged_uc = r.charged_uc + EXCLUDED.charged_uc;
    INSERT INTO usage_key_month_rollups AS r (key_id, month, account_id, requests, tokens, charged_uc)
        VALUES (NEW.key_id, NEW.month, NEW.account_id, 1, NEW.input_tokens + NEW.output_tokens
            + NEW.cache_creation_tokens + NEW.cache_read_tokens, NEW.charged_uc)
    ON CONFLICT (key_id, month) DO UPDATE SET
        requests = r.requests + 1,
        tokens = r.tokens + EXCLUDED.tokens,
        charged_uc = r.charged_uc + EXCLUDED.charged_uc;
    RETURN NULL;
END
$$;
CREATE TRIGGER usage_records_rollup AFTER INSERT ON usage_records
    FOR EACH ROW EXECUTE FUNCTION modelgate_usage_rollup();

-- The rollups of the records already written.
INSERT INTO usage_rollups (key_id, day, model, endpoint, status, account_id, month, requests, input_tokens, output_tokens, cache_creation_tokens,
        cache_read_tokens, cache_write_1h_tokens, web_search_requests, charged_uc)
SELECT key_id, to_char(to_timestamp(created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD'), model, endpoint, status,
    MIN(account_id), MIN(month), COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cache_creation_tokens),
    SUM(cache_read_tokens), SUM(cache_write_1h_tokens), SUM(web_search_requests), SUM(charged_uc)
FROM usage_records GROUP BY 1, 2, 3, 4, 5;
INSERT INTO usage_account_rollups (account_id, day, model, endpoint, status, month, requests, input_tokens, output_tokens, cache_creation_tokens,
        cache_read_tokens, cache_write_1h_tokens, web_search_requests, charged_uc)
SELECT account_id, to_char(to_timestamp(created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD'), model, endpoint, status,
    MIN(month), COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cache_creation_tokens),
    SUM(cache_read_tokens), SUM(cache_write_1h_tokens), SUM(web_search_requests), SUM(charged_uc)
FROM usage_records GROUP BY 1, 2, 3, 4, 5;
INSERT INTO usage_key_month_rollups (key_id, month, account_id, requests, tokens, charged_uc)
SELECT key_id, month, MIN(account_id), COUNT(*),
    SUM(input_tokens + output_tokens + cache_creation_tokens + cache_read_tokens), SUM(charged_uc)
FROM usage_records GROUP BY 1, 2;

-- The usage log pages newest first by (created_at, request_id): operator-wide and per account
-- from an index in that order, whatever the months.
CREATE INDEX usage_created ON usage_records(created_at, request_id);
CREATE INDEX usage_account_created ON usage_records(account_id, created_at, request_id);

-- The admin key list pages by (created_at, id), of every key or of one account's.
CREATE INDEX api_keys_created ON api_keys(created_at, id);
CREATE INDEX api_keys_account_created ON api_keys(account_id, created_at, id);
