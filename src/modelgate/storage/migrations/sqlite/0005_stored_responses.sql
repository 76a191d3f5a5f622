-- Stored Responses state (issue #17): responses and conversations owned by an account, their
-- items in order, and the bytes each account stores (storage.responses holds the invariants).
CREATE TABLE stored_objects (
    id              TEXT PRIMARY KEY,
    account_id      INTEGER NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    kind            TEXT NOT NULL CHECK (kind IN ('response', 'conversation')),
    key_id          TEXT NOT NULL DEFAULT '',
    previous_id     TEXT,
    conversation_id TEXT,
    holder          TEXT NOT NULL DEFAULT '',
    body            BLOB NOT NULL,
    bytes           INTEGER NOT NULL CHECK (bytes >= 0),
    created_at      REAL NOT NULL,
    expires_at      REAL NOT NULL
);
CREATE INDEX stored_objects_account ON stored_objects(account_id);
CREATE INDEX stored_objects_expiry ON stored_objects(expires_at);

CREATE TABLE stored_items (
    owner_id   TEXT NOT NULL REFERENCES stored_objects(id) ON DELETE CASCADE,
    position   INTEGER NOT NULL,
    account_id INTEGER NOT NULL,
    item_id    TEXT NOT NULL,
    section    TEXT NOT NULL CHECK (section IN ('input', 'output', 'item')),
    body       BLOB NOT NULL,
    PRIMARY KEY (owner_id, position)
);
CREATE INDEX stored_items_by_id ON stored_items(account_id, item_id);

CREATE TABLE state_usage (
    account_id INTEGER PRIMARY KEY REFERENCES accounts(id) ON DELETE CASCADE,
    bytes      INTEGER NOT NULL DEFAULT 0 CHECK (bytes >= 0)
);
