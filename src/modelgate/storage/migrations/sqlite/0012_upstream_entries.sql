-- Providers, deployments, aliases and prices changed through the admin API (modelgate.liveconfig):
-- they win over the configuration file's entries of the same name. Credential values are never
-- stored in the clear: ``sealed`` holds them AES-GCM sealed under a key derived from the server
-- secret; ``body`` (JSON) holds everything else. Every change adds one to ``generation``, which
-- every serving process polls to apply the change within a second.
CREATE TABLE upstream_entries (
    kind TEXT NOT NULL CHECK (kind IN ('provider', 'deployments', 'alias')),
    name TEXT NOT NULL,
    body TEXT NOT NULL,
    sealed BLOB,
    updated_at REAL NOT NULL,
    PRIMARY KEY (kind, name)
);
-- A model's price from ``effective_from`` (seconds since the epoch) on: the row with the latest
-- ``effective_from`` not in the future is in force; later rows are scheduled. ``body`` is JSON:
-- the price fields given, in micro-credits.
CREATE TABLE model_prices (
    model_id TEXT NOT NULL,
    effective_from REAL NOT NULL,
    body TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (model_id, effective_from)
);
CREATE TABLE upstream_generation (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL
);
INSERT INTO upstream_generation (id, generation) VALUES (1, 0);
