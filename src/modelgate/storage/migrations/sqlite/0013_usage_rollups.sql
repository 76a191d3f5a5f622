-- Issue #34 (a long history): usage rollups kept on write, and indexes for the usage log's pages.
--
-- usage_rollups: per key, UTC day, model, endpoint and status; usage_account_rollups: the same per
-- account (every key of it); usage_key_month_rollups: per key and month (top keys). Reports read these instead of the records: an overview, a daily chart
-- or a top-keys list reads days x models (x endpoints x statuses) rows, not the month's records.
-- Both are kept by the triggers below, in the transaction that inserts the record (the ledger's
-- group commit), so they always equal a scan of the records ever written; deleting records
-- (usage.retention_days) leaves them. `modelgate usage rebuild-rollups` recomputes both from the
-- records that remain.
CREATE TABLE usage_rollups (
    key_id                TEXT NOT NULL,
    day                   TEXT NOT NULL,
    model                 TEXT NOT NULL,
    endpoint              TEXT NOT NULL,
    status                TEXT NOT NULL,
    account_id            INTEGER NOT NULL,
    month                 TEXT NOT NULL,
    requests              INTEGER NOT NULL DEFAULT 0,
    input_tokens          INTEGER NOT NULL DEFAULT 0,
    output_tokens         INTEGER NOT NULL DEFAULT 0,
    cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens     INTEGER NOT NULL DEFAULT 0,
    cache_write_1h_tokens INTEGER NOT NULL DEFAULT 0,
    web_search_requests   INTEGER NOT NULL DEFAULT 0,
    charged_uc            INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, day, model, endpoint, status)
) STRICT, WITHOUT ROWID;
CREATE INDEX usage_rollups_month ON usage_rollups(month, account_id, key_id);

CREATE TABLE usage_account_rollups (
    account_id            INTEGER NOT NULL,
    day                   TEXT NOT NULL,
    model                 TEXT NOT NULL,
    endpoint              TEXT NOT NULL,
    status                TEXT NOT NULL,
    month                 TEXT NOT NULL,
    requests              INTEGER NOT NULL DEFAULT 0,
    input_tokens          INTEGER NOT NULL DEFAULT 0,
    output_tokens         INTEGER NOT NULL DEFAULT 0,
    cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens     INTEGER NOT NULL DEFAULT 0,
    cache_write_1h_tokens INTEGER NOT NULL DEFAULT 0,
    web_search_requests   INTEGER NOT NULL DEFAULT 0,
    charged_uc            INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, day, model, endpoint, status)
) STRICT, WITHOUT ROWID;
CREATE INDEX usage_account_rollups_month ON usage_account_rollups(month);

-- Per key and month: what top keys ranks (one row per key active in the month).
CREATE TABLE usage_key_month_rollups (
    key_id     TEXT NOT NULL,
    month      TEXT NOT NULL,
    account_id INTEGER NOT NULL,
    requests   INTEGER NOT NULL DEFAULT 0,
    tokens     INTEGER NOT NULL DEFAULT 0,
    charged_uc INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, month)
) STRICT, WITHOUT ROWID;
CREATE INDEX usage_key_month_rollups_month ON usage_key_month_rollups(month, account_id);

CREATE TRIGGER usage_records_rollup AFTER INSERT ON usage_records BEGIN
    INSERT INTO usage_rollups (key_id, day, model, endpoint, status, account_id, month, requests,
        input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, cache_write_1h_tokens,
        web_search_requests, charged_uc)
    VALUES (NEW.key_id, strftime('%Y-%m-%d', NEW.created_at, 'unixepoch'), NEW.model, NEW.endpoint,
        NEW.status, NEW.account_id, NEW.month, 1, NEW.input_tokens, NEW.output_tokens,
        NEW.cache_creation_tokens, NEW.cache_read_tokens, NEW.cache_write_1h_tokens,
        NEW.web_search_requests, NEW.charged_uc)
    ON CONFLICT (key_id, day, model, endpoint, status) DO UPDATE SET
        requests = requests + 1,
        input_tokens = input_tokens + excluded.input_tokens,
        output_tokens = output_tokens + excluded.output_tokens,
        cache_creation_tokens = cache_creation_tokens + excluded.cache_creation_tokens,
        cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
        cache_write_1h_tokens = cache_write_1h_tokens + excluded.cache_write_1h_tokens,
        web_search_requests = web_search_requests + excluded.web_search_requests,
        charged_uc = charged_uc + excluded.charged_uc;  -- (not at a line's end: the runner splits there)
    INSERT INTO usage_account_rollups (account_id, day, model, endpoint, status, month, requests,
        input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, cache_write_1h_tokens,
        web_search_requests, charged_uc)
    VALUES (NEW.account_id, strftime('%Y-%m-%d', NEW.created_at, 'unixepoch'), NEW.model,
        NEW.endpoint, NEW.status, NEW.month, 1, NEW.input_tokens, NEW.output_tokens,
        NEW.cache_creation_tokens, NEW.cache_read_tokens, NEW.cache_write_1h_tokens,
        NEW.web_search_requests, NEW.charged_uc)
    ON CONFLICT (account_id, day, model, endpoint, status) DO UPDATE SET
        requests = requests + 1,
        input_tokens = input_tokens + excluded.input_tokens,
        output_tokens = output_tokens + excluded.output_tokens,
        cache_creation_tokens = cache_creation_tokens + excluded.cache_creation_tokens,
        cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
        cache_write_1h_tokens = cache_write_1h_tokens + excluded.cache_write_1h_tokens,
        web_search_requests = web_search_requests + excluded.web_search_requests,
        charged_uc = charged_uc + excluded.charged_uc;  -- (not at a line's end: the runner splits there)
    INSERT INTO usage_key_month_rollups (key_id, month, account_id, requests, tokens, charged_uc)
    VALUES (NEW.key_id, NEW.month, NEW.account_id, 1, NEW.input_tokens + NEW.output_tokens +
        NEW.cache_creation_tokens + NEW.cache_read_tokens, NEW.charged_uc)
    ON CONFLICT (key_id, month) DO UPDATE SET
        requests = requests + 1,
        tokens = tokens + excluded.tokens,
        charged_uc = charged_uc + excluded.charged_uc;  -- (not at a line's end: the runner splits there)
END;

-- Inside the trigger no semicolon ends a line: the migration runner splits statements there.

-- The rollups of the records already written.
INSERT INTO usage_rollups (key_id, day, model, endpoint, status, account_id, month, requests,
    input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, cache_write_1h_tokens,
    web_search_requests, charged_uc)
SELECT key_id, strftime('%Y-%m-%d', created_at, 'unixepoch'), model, endpoint, status,
    MIN(account_id), MIN(month), COUNT(*), SUM(input_tokens), SUM(output_tokens),
    SUM(cache_creation_tokens), SUM(cache_read_tokens), SUM(cache_write_1h_tokens),
    SUM(web_search_requests), SUM(charged_uc)
FROM usage_records GROUP BY 1, 2, 3, 4, 5;
INSERT INTO usage_account_rollups (account_id, day, model, endpoint, status, month, requests,
    input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, cache_write_1h_tokens,
    web_search_requests, charged_uc)
SELECT account_id, strftime('%Y-%m-%d', created_at, 'unixepoch'), model, endpoint, status,
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
CREATE INDEX api_keys_account_created ON api_keys(account_id, created_at, id)
