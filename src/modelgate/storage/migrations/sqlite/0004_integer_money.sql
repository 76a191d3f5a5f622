-- Money and token counts are integers. SQLite stores whatever it is given (an integer that
-- overflows 64 bits silently becomes a REAL, after which charges no longer change it), so the
-- tables that hold them refuse anything else: the ledger's leaf tables are rebuilt STRICT, and
-- accounts and api_keys (other tables reference them) get triggers with the same effect. A
-- value that was already stored as a REAL is converted to an integer on the way.
-- usage_records also gains shortfall_uc: what an upstream reported beyond the request's hold
-- and could not be charged (docs/billing.md).
CREATE TABLE topups_strict (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    amount_uc  INTEGER NOT NULL,
    note       TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
) STRICT;
INSERT INTO topups_strict (id, account_id, amount_uc, note, created_at)
    SELECT id, account_id, CAST(amount_uc AS INTEGER), note, created_at FROM topups;
DROP TABLE topups;
ALTER TABLE topups_strict RENAME TO topups;
CREATE INDEX topups_account ON topups(account_id);

CREATE TABLE key_month_spend_strict (
    key_id      TEXT NOT NULL REFERENCES api_keys(id),
    month       TEXT NOT NULL,
    spent_uc    INTEGER NOT NULL DEFAULT 0,
    reserved_uc INTEGER NOT NULL DEFAULT 0 CHECK (reserved_uc >= 0),
    PRIMARY KEY (key_id, month)
) STRICT, WITHOUT ROWID;
INSERT INTO key_month_spend_strict
    SELECT key_id, month, CAST(spent_uc AS INTEGER), CAST(reserved_uc AS INTEGER) FROM key_month_spend;
DROP TABLE key_month_spend;
ALTER TABLE key_month_spend_strict RENAME TO key_month_spend;

CREATE TABLE reservations_strict (
    request_id TEXT PRIMARY KEY,
    key_id     TEXT NOT NULL,
    account_id INTEGER NOT NULL,
    month      TEXT NOT NULL,
    amount_uc  INTEGER NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    endpoint   TEXT NOT NULL DEFAULT 'unknown',
    model      TEXT NOT NULL DEFAULT 'unknown'
) STRICT, WITHOUT ROWID;
INSERT INTO reservations_strict
    SELECT request_id, key_id, account_id, month, CAST(amount_uc AS INTEGER), created_at, expires_at,
           endpoint, model
    FROM reservations;
DROP TABLE reservations;
ALTER TABLE reservations_strict RENAME TO reservations;

CREATE TABLE usage_records_strict (
    request_id            TEXT PRIMARY KEY,
    key_id                TEXT NOT NULL,
    account_id            INTEGER NOT NULL,
    endpoint              TEXT NOT NULL,
    model                 TEXT NOT NULL,
    month                 TEXT NOT NULL,
    status                TEXT NOT NULL,
    input_tokens          INTEGER NOT NULL DEFAULT 0,
    output_tokens         INTEGER NOT NULL DEFAULT 0,
    cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens     INTEGER NOT NULL DEFAULT 0,
    charged_uc            INTEGER NOT NULL DEFAULT 0,
    created_at            REAL NOT NULL,
    finished_at           REAL NOT NULL,
    shortfall_uc          INTEGER NOT NULL DEFAULT 0
) STRICT;
INSERT INTO usage_records_strict (request_id, key_id, account_id, endpoint, model, month, status,
    input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, charged_uc, created_at,
    finished_at)
    SELECT request_id, key_id, account_id, endpoint, model, month, status,
           CAST(input_tokens AS INTEGER), CAST(output_tokens AS INTEGER),
           CAST(cache_creation_tokens AS INTEGER), CAST(cache_read_tokens AS INTEGER),
           CAST(charged_uc AS INTEGER), created_at, finished_at
    FROM usage_records;
DROP TABLE usage_records;
ALTER TABLE usage_records_strict RENAME TO usage_records;
-- The indexes as 0003 left them (the usage log pages by start time within a key's or account's month).
CREATE INDEX usage_key_month ON usage_records(key_id, month, created_at);
CREATE INDEX usage_account_month ON usage_records(account_id, month, created_at);

UPDATE accounts SET balance_uc = CAST(balance_uc AS INTEGER), reserved_uc = CAST(reserved_uc AS INTEGER)
    WHERE typeof(balance_uc) <> 'integer' OR typeof(reserved_uc) <> 'integer';
CREATE TRIGGER accounts_integer_money_insert BEFORE INSERT ON accounts
    WHEN typeof(NEW.balance_uc) <> 'integer' OR typeof(NEW.reserved_uc) <> 'integer'
    BEGIN SELECT RAISE(ABORT, 'accounts: balance_uc and reserved_uc must be integers'); END;
CREATE TRIGGER accounts_integer_money_update BEFORE UPDATE ON accounts
    WHEN typeof(NEW.balance_uc) <> 'integer' OR typeof(NEW.reserved_uc) <> 'integer'
    BEGIN SELECT RAISE(ABORT, 'accounts: balance_uc and reserved_uc must be integers'); END;
UPDATE api_keys SET monthly_cap_uc = CAST(monthly_cap_uc AS INTEGER)
    WHERE monthly_cap_uc IS NOT NULL AND typeof(monthly_cap_uc) <> 'integer';
CREATE TRIGGER api_keys_integer_cap_insert BEFORE INSERT ON api_keys
    WHEN typeof(NEW.monthly_cap_uc) NOT IN ('integer', 'null') OR typeof(NEW.rpm) <> 'integer'
    BEGIN SELECT RAISE(ABORT, 'api_keys: monthly_cap_uc and rpm must be integers'); END;
CREATE TRIGGER api_keys_integer_cap_update BEFORE UPDATE ON api_keys
    WHEN typeof(NEW.monthly_cap_uc) NOT IN ('integer', 'null') OR typeof(NEW.rpm) <> 'integer'
    BEGIN SELECT RAISE(ABORT, 'api_keys: monthly_cap_uc and rpm must be integers'); END
