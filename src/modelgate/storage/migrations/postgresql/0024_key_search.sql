-- Issue #34 (keys at scale): the keys search (GET /admin/api/keys?q=) finds its candidates in
-- trigram indexes instead of reading every key (storage/key_search.py): GIN pg_trgm indexes on the
-- lowercased name, id and display prefix, the expressions the search's LIKE reads. PostgreSQL keeps
-- them in step with every write of a key.
--
-- pg_trgm is a contrib extension (Debian: postgresql-contrib, in the server package since 10),
-- trusted since PostgreSQL 13: the database's owner (or anyone with CREATE on it) may create it.
-- When it cannot be created here (not installed, not allowed), the migration still completes
-- without the indexes and the search reads the key list as before, with the same results; a
-- NOTICE says so, and docs/admin-api.md gives the statements an operator runs to add them later.
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'modelgate: pg_trgm unavailable (%): the keys search runs without its index', SQLERRM;
END
$$;

DO $$
DECLARE
    ops TEXT;
BEGIN
    SELECT quote_ident(n.nspname) || '.gin_trgm_ops' INTO ops
        FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
    IF ops IS NOT NULL THEN
        EXECUTE format('CREATE INDEX IF NOT EXISTS api_keys_search_name ON api_keys USING gin (LOWER(name) %s)', ops);
        EXECUTE format('CREATE INDEX IF NOT EXISTS api_keys_search_id ON api_keys USING gin (LOWER(id) %s)', ops);
        EXECUTE format('CREATE INDEX IF NOT EXISTS api_keys_search_prefix ON api_keys USING gin (LOWER(prefix) %s)', ops);
    END IF;
END
$$;
