-- A reservation row now lives only while its request is in flight: settle and release delete it
-- (the usage record is the permanent trace), so the table stays small and has no state column.
-- Both ledger tables become WITHOUT ROWID: one b-tree each instead of a table plus a key index,
-- so a ledger write touches fewer pages. A hold also records its endpoint and model, so one the
-- sweeper releases still says what it was for.
CREATE TABLE reservations_lean (
    request_id TEXT PRIMARY KEY,
    key_id     TEXT NOT NULL,
    account_id INTEGER NOT NULL,
    month      TEXT NOT NULL,
    amount_uc  INTEGER NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    endpoint   TEXT NOT NULL DEFAULT 'unknown',
    model      TEXT NOT NULL DEFAULT 'unknown'
) WITHOUT ROWID;
INSERT INTO reservations_lean (request_id, key_id, account_id, month, amount_uc, created_at, expires_at)
    SELECT request_id, key_id, account_id, month, amount_uc, created_at, expires_at
    FROM reservations WHERE state = 'pending';
DROP TABLE reservations;
ALTER TABLE reservations_lean RENAME TO reservations;

CREATE TABLE key_month_spend_lean (
    key_id      TEXT NOT NULL REFERENCES api_keys(id),
    month       TEXT NOT NULL,
    spent_uc    INTEGER NOT NULL DEFAULT 0,
    reserved_uc INTEGER NOT NULL DEFAULT 0 CHECK (reserved_uc >= 0),
    PRIMARY KEY (key_id, month)
) WITHOUT ROWID;
INSERT INTO key_month_spend_lean SELECT key_id, month, spent_uc, reserved_uc FROM key_month_spend;
DROP TABLE key_month_spend;
ALTER TABLE key_month_spend_lean RENAME TO key_month_spend;
