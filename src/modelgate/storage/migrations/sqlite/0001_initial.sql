-- Accounts hold the shared balance; reserved_uc is money held by requests in flight.
CREATE TABLE accounts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL UNIQUE,
    balance_uc  INTEGER NOT NULL DEFAULT 0,
    reserved_uc INTEGER NOT NULL DEFAULT 0 CHECK (reserved_uc >= 0),
    created_at  REAL NOT NULL,
    CHECK (balance_uc >= reserved_uc)
);

CREATE TABLE topups (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    amount_uc  INTEGER NOT NULL,
    note       TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
);
CREATE INDEX topups_account ON topups(account_id);

-- Keys: only HMAC digests of secrets are stored. version increases on every change.
CREATE TABLE api_keys (
    id                  TEXT PRIMARY KEY,
    account_id          INTEGER NOT NULL REFERENCES accounts(id),
    name                TEXT NOT NULL DEFAULT '',
    grp                 TEXT NOT NULL CHECK (grp IN ('Basic', 'Pro', 'Nova')),
    rpm                 INTEGER NOT NULL CHECK (rpm > 0),
    allowed_models      TEXT,
    monthly_cap_uc      INTEGER,
    state               TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'disabled')),
    digest              BLOB NOT NULL UNIQUE,
    prefix              TEXT NOT NULL,
    last4               TEXT NOT NULL,
    previous_digest     BLOB UNIQUE,
    previous_expires_at REAL,
    created_at          REAL NOT NULL,
    rotated_at          REAL,
    revoked_at          REAL,
    version             INTEGER NOT NULL
);
CREATE INDEX api_keys_account ON api_keys(account_id);
CREATE INDEX api_keys_version ON api_keys(version);

CREATE TABLE admin_tokens (
    id         TEXT PRIMARY KEY,
    digest     BLOB NOT NULL UNIQUE,
    account_id INTEGER REFERENCES accounts(id),
    created_at REAL NOT NULL
);

-- Spend of a key per UTC calendar month ('YYYY-MM').
CREATE TABLE key_month_spend (
    key_id      TEXT NOT NULL REFERENCES api_keys(id),
    month       TEXT NOT NULL,
    spent_uc    INTEGER NOT NULL DEFAULT 0,
    reserved_uc INTEGER NOT NULL DEFAULT 0 CHECK (reserved_uc >= 0),
    PRIMARY KEY (key_id, month)
);

CREATE TABLE reservations (
    request_id TEXT PRIMARY KEY,
    key_id     TEXT NOT NULL,
    account_id INTEGER NOT NULL,
    month      TEXT NOT NULL,
    amount_uc  INTEGER NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('pending', 'settled', 'released')),
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX reservations_pending ON reservations(state, expires_at);

CREATE TABLE usage_records (
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
    finished_at           REAL NOT NULL
);
CREATE INDEX usage_key_month ON usage_records(key_id, month);
CREATE INDEX usage_account_month ON usage_records(account_id, month);
