-- Issue #34 (keys at scale): the keys search (GET /admin/api/keys?q=) finds its candidates in a
-- trigram index instead of reading every key (storage/key_search.py). api_keys_search holds each
-- key's name, id and display prefix; the trigram tokenizer (case folded) answers a phrase query
-- with the rows containing it as a substring of one column. The page's LIKE still decides what
-- matches, so the index only has to hold at least the keys that can match.
--
-- The rows are found by key id (a phrase query on the id column), not by api_keys' rowid: VACUUM
-- may renumber the rowids of a table without an INTEGER PRIMARY KEY. Kept by the triggers below in
-- the transaction that writes the key: a new key, a rename, a rotation (new prefix), a delete.
-- Revoking changes none of the three columns (a revoked key is listed and found as before). An id
-- under three characters (never issued) has no trigram to find its old row by: that row stays, a
-- candidate too many that the page's LIKE discards. Inside a trigger body a statement ends with
-- "; " on the next line: the migration runner splits a file at a semicolon that ends a line.
CREATE VIRTUAL TABLE api_keys_search USING fts5(name, id, prefix, tokenize = 'trigram');
INSERT INTO api_keys_search (name, id, prefix) SELECT name, id, prefix FROM api_keys;
CREATE TRIGGER api_keys_search_insert AFTER INSERT ON api_keys BEGIN
    INSERT INTO api_keys_search (name, id, prefix) VALUES (new.name, new.id, new.prefix); END;
CREATE TRIGGER api_keys_search_update AFTER UPDATE OF id, name, prefix ON api_keys
    WHEN old.id IS NOT new.id OR old.name IS NOT new.name OR old.prefix IS NOT new.prefix BEGIN
    DELETE FROM api_keys_search WHERE api_keys_search MATCH 'id : "' || replace(old.id, '"', '""') || '"' AND id = old.id
    ; INSERT INTO api_keys_search (name, id, prefix) VALUES (new.name, new.id, new.prefix); END;
CREATE TRIGGER api_keys_search_delete AFTER DELETE ON api_keys BEGIN
    DELETE FROM api_keys_search WHERE api_keys_search MATCH 'id : "' || replace(old.id, '"', '""') || '"' AND id = old.id; END;
