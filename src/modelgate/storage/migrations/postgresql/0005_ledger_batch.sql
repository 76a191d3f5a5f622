-- Group commit of ledger writes (storage/postgres_ledger.py): the reserves, settles and releases
-- that one gateway instance has ready together run in ONE statement, so in one transaction and one
-- round trip. The rules are those of storage/base.py (decide_hold, decide_charge), applied here to
-- rows locked in a fixed order: first the reservations being finished (by request id), then every
-- account involved (by id), then every key-month involved (by key, month). Each batch takes its
-- locks in that same order, so concurrent batches of any number of instances cannot deadlock;
-- then the operations run one after another in the order given, each seeing the ones before.
--
-- kinds: 'r' reserve, 's' settle (charge), 'l' release (charge nothing).
-- amounts: a reserve's worst case, a settlement's real cost. nows: a reserve's start, a
-- settlement's finish. A request id already held (reserve) or already recorded (settle, release)
-- fails the whole statement on a unique key; the caller then runs each operation of the batch
-- alone, so only that one is refused.
--
-- One row per operation, in order: outcome ('granted', 'balance', 'monthly_cap', 'applied',
-- 'not_applied'), amount (granted or charged), shortfall, the free balance and free
-- cap after the step (cap NULL: none), and for a finished reservation its month, key, account,
-- endpoint, model and start (the authority on what is booked).
CREATE FUNCTION modelgate_ledger(
    kinds TEXT[],
    request_ids TEXT[],
    key_ids TEXT[],
    account_ids BIGINT[],
    months TEXT[],
    amounts BIGINT[],
    minimums BIGINT[],
    nows DOUBLE PRECISION[],
    expires DOUBLE PRECISION[],
    endpoints TEXT[],
    models TEXT[],
    statuses TEXT[],
    input_tokens BIGINT[],
    output_tokens BIGINT[],
    cache_creation_tokens BIGINT[],
    cache_read_tokens BIGINT[]
) RETURNS TABLE (
    outcome TEXT,
    amount_uc BIGINT,
    shortfall_uc BIGINT,
    balance_free_uc BIGINT,
    cap_free_uc BIGINT,
    month TEXT,
    key_id TEXT,
    account_id BIGINT,
    endpoint TEXT,
    model TEXT,
    created_at DOUBLE PRECISION
) LANGUAGE plpgsql AS $$
DECLARE
    i INT;
    n INT := cardinality(kinds);
    finishing TEXT[];
    free BIGINT;
    cap BIGINT;
    used BIGINT;
    cap_free BIGINT;
    affordable BIGINT;
    granted BIGINT;
    cost BIGINT;
    charged BIGINT;
    room BIGINT;
    held RECORD;
BEGIN
    -- Locks, in the one order every batch uses.
    finishing := ARRAY(SELECT request_ids[j] FROM generate_subscripts(kinds, 1) j WHERE kinds[j] <> 'r');
    PERFORM 1 FROM reservations r WHERE r.request_id = ANY(finishing) ORDER BY r.request_id FOR UPDATE;
    PERFORM 1 FROM accounts a
        WHERE a.id IN (
            SELECT account_ids[j] FROM generate_subscripts(kinds, 1) j WHERE kinds[j] = 'r'
            UNION SELECT r.account_id FROM reservations r WHERE r.request_id = ANY(finishing)
        )
        ORDER BY a.id FOR UPDATE;
    INSERT INTO key_month_spend (key_id, month)
        SELECT DISTINCT key_ids[j], months[j] FROM generate_subscripts(kinds, 1) j
        WHERE kinds[j] = 'r' AND EXISTS (SELECT 1 FROM api_keys k WHERE k.id = key_ids[j])
        ORDER BY 1, 2
        ON CONFLICT DO NOTHING;
    PERFORM 1 FROM key_month_spend s
        WHERE (s.key_id, s.month) IN (
            SELECT key_ids[j], months[j] FROM generate_subscripts(kinds, 1) j WHERE kinds[j] = 'r'
            UNION SELECT r.key_id, r.month FROM reservations r WHERE r.request_id = ANY(finishing)
        )
        ORDER BY s.key_id, s.month FOR UPDATE;

    FOR i IN 1 .. n LOOP
        outcome := NULL; amount_uc := 0; shortfall_uc := 0; balance_free_uc := 0; cap_free_uc := NULL;
        month := NULL; key_id := NULL; account_id := NULL; endpoint := NULL; model := NULL;
        created_at := NULL;
        IF kinds[i] = 'r' THEN
            SELECT a.balance_uc - a.reserved_uc, k.monthly_cap_uc, COALESCE(s.spent_uc + s.reserved_uc, 0)
                INTO free, cap, used
                FROM accounts a JOIN api_keys k ON k.id = key_ids[i]
                LEFT JOIN key_month_spend s ON s.key_id = key_ids[i] AND s.month = months[i]
                WHERE a.id = account_ids[i];
            IF NOT FOUND THEN
                outcome := 'balance';
            ELSE
                cap_free := CASE WHEN cap IS NULL THEN NULL ELSE GREATEST(0, cap - used) END;
                affordable := CASE WHEN cap_free IS NULL THEN free ELSE LEAST(free, cap_free) END;
                IF affordable < minimums[i] THEN
                    outcome := CASE WHEN cap_free IS NOT NULL AND cap_free <= free
                        THEN 'monthly_cap' ELSE 'balance' END;
                    amount_uc := GREATEST(0, affordable);
                ELSE
                    granted := LEAST(amounts[i], affordable);
                    -- A request id already held fails the statement (unique key): the caller
                    -- then runs each operation alone, so only that one is refused.
                    WITH hold AS (
                        INSERT INTO reservations (request_id, key_id, account_id, month, amount_uc,
                            created_at, expires_at, endpoint, model)
                        VALUES (request_ids[i], key_ids[i], account_ids[i], months[i], granted, nows[i],
                            expires[i], endpoints[i], models[i])
                    ), acct AS (
                        UPDATE accounts a SET reserved_uc = a.reserved_uc + granted WHERE a.id = account_ids[i]
                    )
                    UPDATE key_month_spend s SET reserved_uc = s.reserved_uc + granted
                        WHERE s.key_id = key_ids[i] AND s.month = months[i];
                    outcome := 'granted';
                    amount_uc := granted;
                    balance_free_uc := free - granted;
                    cap_free_uc := cap_free - granted;
                END IF;
            END IF;
        ELSE
            DELETE FROM reservations r WHERE r.request_id = request_ids[i]
                RETURNING r.amount_uc, r.month, r.key_id, r.account_id, r.endpoint, r.model, r.created_at
                INTO held;
            IF NOT FOUND THEN
                -- Finished before (or never reserved): nothing changes; report what is free.
                outcome := 'not_applied';
                SELECT (SELECT a.balance_uc - a.reserved_uc FROM accounts a WHERE a.id = account_ids[i]),
                    (SELECT k.monthly_cap_uc FROM api_keys k WHERE k.id = key_ids[i]),
                    (SELECT s.spent_uc + s.reserved_uc FROM key_month_spend s
                        WHERE s.key_id = key_ids[i] AND s.month = months[i])
                    INTO free, cap, used;
                balance_free_uc := COALESCE(free, 0);
                cap_free_uc := CASE WHEN cap IS NULL THEN NULL ELSE GREATEST(0, cap - COALESCE(used, 0)) END;
            ELSE
                charged := 0;
                IF kinds[i] = 's' THEN
                    cost := GREATEST(amounts[i], 0);
                    charged := cost;
                    IF cost > held.amount_uc THEN
                        -- Beyond the hold only what is free is charged; the rest is the shortfall.
                        SELECT (SELECT a.balance_uc - a.reserved_uc FROM accounts a WHERE a.id = held.account_id),
                            (SELECT k.monthly_cap_uc FROM api_keys k WHERE k.id = held.key_id),
                            (SELECT s.spent_uc + s.reserved_uc FROM key_month_spend s
                                WHERE s.key_id = held.key_id AND s.month = held.month)
                            INTO free, cap, used;
                        room := GREATEST(0, COALESCE(free, 0));
                        IF cap IS NOT NULL THEN
                            room := LEAST(room, GREATEST(0, cap - COALESCE(used, 0)));
                        END IF;
                        charged := held.amount_uc + LEAST(cost - held.amount_uc, room);
                        shortfall_uc := cost - charged;
                    END IF;
                END IF;
                -- A request id already recorded fails the statement (unique key), as above.
                WITH acct AS (
                    UPDATE accounts a SET reserved_uc = a.reserved_uc - held.amount_uc,
                        balance_uc = a.balance_uc - charged
                    WHERE a.id = held.account_id RETURNING a.balance_uc - a.reserved_uc AS available
                ), spend AS (
                    UPDATE key_month_spend s SET reserved_uc = s.reserved_uc - held.amount_uc,
                        spent_uc = s.spent_uc + charged
                    WHERE s.key_id = held.key_id AND s.month = held.month
                    RETURNING s.spent_uc + s.reserved_uc AS used
                ), rec AS (
                    INSERT INTO usage_records (request_id, key_id, account_id, endpoint, model, month, status,
                        created_at, finished_at, input_tokens, output_tokens, cache_creation_tokens,
                        cache_read_tokens, charged_uc, shortfall_uc)
                    VALUES (request_ids[i], held.key_id, held.account_id, held.endpoint, held.model,
                        held.month, statuses[i], held.created_at, nows[i], input_tokens[i], output_tokens[i],
                        cache_creation_tokens[i], cache_read_tokens[i], charged, shortfall_uc)
                )
                SELECT (SELECT available FROM acct), (SELECT spend.used FROM spend),
                    (SELECT k.monthly_cap_uc FROM api_keys k WHERE k.id = held.key_id)
                    INTO free, used, cap;
                outcome := 'applied';
                amount_uc := charged;
                balance_free_uc := COALESCE(free, 0);
                cap_free_uc := CASE WHEN cap IS NULL THEN NULL ELSE GREATEST(0, cap - COALESCE(used, 0)) END;
                month := held.month; key_id := held.key_id; account_id := held.account_id;
                endpoint := held.endpoint; model := held.model; created_at := held.created_at;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;
