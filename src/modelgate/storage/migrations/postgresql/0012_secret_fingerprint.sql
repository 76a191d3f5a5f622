-- The fingerprint of the HMAC secret every key and admin token digest in this database was made
-- with (modelgate.secret_file): a start with another secret is refused instead of refusing every
-- key with 401. One row at most.
CREATE TABLE secret_fingerprint (
    id SMALLINT PRIMARY KEY CHECK (id = 1),
    fingerprint TEXT NOT NULL,
    recorded_at DOUBLE PRECISION NOT NULL
);
