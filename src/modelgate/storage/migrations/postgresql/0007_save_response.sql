-- Keeping a stored response (storage/postgres_responses.py, save_response) in ONE statement: one
-- round trip and one commit instead of a transaction of six or seven statements (issue #16: what a
-- Responses request costs in the PostgreSQL mode). The rules are those of storage/responses.py:
--
-- - with a conversation: it must be live (same account, not expired) and is locked first, so
--   appends to one conversation take their positions one after another; its copies of the items
--   (section 'item') are appended and its bytes and expiry updated;
-- - the account's state_usage row is charged with the conditional UPDATE (its row lock serialises
--   concurrent writers of one account, so the limit is never overshot across instances);
-- - nothing is written when the conversation is gone or the limit would be passed (FALSE).
--
-- items: the response's input then output items, as parallel arrays (id, section, body); the
-- conversation's copies are the same items in the same order. size: the response's bytes (body and
-- items); appended: the bytes the copies add to the conversation.
CREATE FUNCTION modelgate_save_response(
    p_id TEXT, p_account BIGINT, p_key TEXT, p_previous TEXT, p_conversation TEXT, p_holder TEXT,
    p_body BYTEA, p_size BIGINT, p_appended BIGINT, p_created DOUBLE PRECISION,
    p_expires DOUBLE PRECISION, p_limit BIGINT, p_item_ids TEXT[], p_sections TEXT[],
    p_bodies BYTEA[]
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
DECLARE
    start INTEGER;
BEGIN
    IF p_conversation IS NOT NULL THEN
        PERFORM 1 FROM stored_objects
            WHERE id = p_conversation AND account_id = p_account AND kind = 'conversation'
                AND expires_at > p_created
            FOR UPDATE;
        IF NOT FOUND THEN
            RETURN FALSE;
        END IF;
    END IF;
    INSERT INTO state_usage (account_id, bytes) VALUES (p_account, 0) ON CONFLICT DO NOTHING;
    UPDATE state_usage SET bytes = bytes + p_size + p_appended
        WHERE account_id = p_account AND bytes + p_size + p_appended <= p_limit;
    IF NOT FOUND THEN
        RETURN FALSE;
    END IF;
    INSERT INTO stored_objects (id, account_id, kind, key_id, previous_id, conversation_id, holder,
        body, bytes, created_at, expires_at)
        VALUES (p_id, p_account, 'response', p_key, p_previous, p_conversation, p_holder, p_body,
            p_size, p_created, p_expires);
    INSERT INTO stored_items (owner_id, position, account_id, item_id, section, body)
        SELECT p_id, t.n - 1, p_account, t.item_id, t.section, t.body
        FROM unnest(p_item_ids, p_sections, p_bodies) WITH ORDINALITY AS t(item_id, section, body, n);
    IF p_conversation IS NOT NULL THEN
        SELECT COALESCE(MAX(position), -1) + 1 INTO start FROM stored_items WHERE owner_id = p_conversation;
        INSERT INTO stored_items (owner_id, position, account_id, item_id, section, body)
            SELECT p_conversation, start + t.n - 1, p_account, t.item_id, 'item', t.body
            FROM unnest(p_item_ids, p_bodies) WITH ORDINALITY AS t(item_id, body, n);
        UPDATE stored_objects SET bytes = bytes + p_appended, expires_at = GREATEST(expires_at, p_expires)
            WHERE id = p_conversation;
    END IF;
    RETURN TRUE;
END;
$$;
