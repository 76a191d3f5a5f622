-- Group commit of ledger writes (storage/postgres_ledger.py): the reserves, settles and releases
-- that one gateway instance has ready together run in ONE statement, so in one transaction and one
-- round trip. The rules are those of storage/base.py (decide_hold, decide_charge).
--
-- Serialisation: before anything else the batch takes a transaction-scoped advisory lock on every
-- reservation it finishes, every account and every key-month it touches, in one global order
-- (class, then key: 1 reservations, 2 accounts, 3 key-months; the caller passes them sorted).
-- Every ledger write runs in such a batch, so two batches touching the same account (or key-month,
-- or reservation) queue on its lock and the later one reads what the earlier one committed; all
-- take their locks in the same order, so no two batches, of any instances, can deadlock. Advisory
-- locks live in memory: unlike SELECT ... FOR UPDATE they write nothing to the rows or the WAL.
-- (Writers outside the ledger only add money or change a key's controls, one row each.) Then the
-- operations run one after another in the order given, each seeing the ones before.
--
-- ops: a JSON array of operations (storage/postgres_ledger.py writes it): kind 'r' reserve, 's'
-- settle (charge), 'l' release (charge nothing); amount: a reserve's worst case, a settlement's
-- real cost; at: a reserve's start, a settlement's finish. locks: [{"c": class, "k": key}, ...]. A request
-- id already held (reserve) or already recorded (settle, release) fails the whole statement on a
-- unique key; the caller then runs each operation of the batch alone, so only that one is refused.
--
-- One row per operation, in order: outcome ('granted', 'balance', 'monthly_cap', 'applied',
-- 'not_applied'), amount (granted or charged), shortfall, the free balance and free cap after the
-- step (cap NULL: none), and for a finished reservation its month, key, account, endpoint, model
-- and start (the authority on what is booked).
CREATE FUNCTION modelgate_ledger(ops JSONB, locks JSONB) RETURNS TABLE (
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
    op RECORD;
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
    -- Every lock the batch needs, first and in the order given (the caller sorts it).
    PERFORM pg_advisory_xact_lock(t.c, t.k) FROM jsonb_to_recordset(locks) AS t(c INT, k INT);

    FOR op IN SELECT * FROM jsonb_to_recordset(ops) AS x(
        kind TEXT, request_id TEXT, key_id TEXT, account_id BIGINT, month TEXT, amount BIGINT,
        minimum BIGINT, at DOUBLE PRECISION, expires DOUBLE PRECISION, endpoint TEXT, model TEXT,
        status TEXT, input_tokens BIGINT, output_tokens BIGINT, cache_creation_tokens BIGINT,
        cache_read_tokens BIGINT)
    LOOP
        outcome := NULL; amount_uc := 0; shortfall_uc := 0; balance_free_uc := 0; cap_free_uc := NULL;
        month := NULL; key_id := NULL; account_id := NULL; endpoint := NULL; model := NULL;
        created_at := NULL;
        IF op.kind = 'r' THEN
            SELECT a.balance_uc - a.reserved_uc, k.monthly_cap_uc, COALESCE(s.spent_uc + s.reserved_uc, 0)
                INTO free, cap, used
                FROM accounts a JOIN api_keys k ON k.id = op.key_id
                LEFT JOIN key_month_spend s ON s.key_id = op.key_id AND s.month = op.month
                WHERE a.id = op.account_id;
            IF NOT FOUND THEN
                outcome := 'balance';
            ELSE
                cap_free := CASE WHEN cap IS NULL THEN NULL ELSE GREATEST(0, cap - used) END;
                affordable := CASE WHEN cap_free IS NULL THEN free ELSE LEAST(free, cap_free) END;
                IF affordable < op.minimum THEN
                    outcome := CASE WHEN cap_free IS NOT NULL AND cap_free <= free
                        THEN 'monthly_cap' ELSE 'balance' END;
                    amount_uc := GREATEST(0, affordable);
                ELSE
                    granted := LEAST(op.amount, affordable);
                    -- A request id already held fails the statement (unique key): the caller
                    -- then runs each operation alone, so only that one is refused.
                    WITH hold AS (
                        INSERT INTO reservations (request_id, key_id, account_id, month, amount_uc,
                            created_at, expires_at, endpoint, model)
                        VALUES (op.request_id, op.key_id, op.account_id, op.month, granted, op.at,
                            op.expires, op.endpoint, op.model)
                    ), acct AS (
                        UPDATE accounts a SET reserved_uc = a.reserved_uc + granted WHERE a.id = op.account_id
                    )
                    INSERT INTO key_month_spend AS s (key_id, month, reserved_uc)
                        VALUES (op.key_id, op.month, granted)
                        ON CONFLICT ON CONSTRAINT key_month_spend_pkey
                        DO UPDATE SET reserved_uc = s.reserved_uc + granted;
                    outcome := 'granted';
                    amount_uc := granted;
                    balance_free_uc := free - granted;
                    cap_free_uc := cap_free - granted;
                END IF;
            END IF;
        ELSE
            DELETE FROM reservations r WHERE r.request_id = op.request_id
                RETURNING r.amount_uc, r.month, r.key_id, r.account_id, r.endpoint, r.model, r.created_at
                INTO held;
            IF NOT FOUND THEN
                -- Finished before (or never reserved): nothing changes; report what is free.
                outcome := 'not_applied';
                SELECT (SELECT a.balance_uc - a.reserved_uc FROM accounts a WHERE a.id = op.account_id),
                    (SELECT k.monthly_cap_uc FROM api_keys k WHERE k.id = op.key_id),
                    (SELECT s.spent_uc + s.reserved_uc FROM key_month_spend s
                        WHERE s.key_id = op.key_id AND s.month = op.month)
                    INTO free, cap, used;
                balance_free_uc := COALESCE(free, 0);
                cap_free_uc := CASE WHEN cap IS NULL THEN NULL ELSE GREATEST(0, cap - COALESCE(used, 0)) END;
            ELSE
                charged := 0;
                IF op.kind = 's' THEN
                    cost := GREATEST(op.amount, 0);
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
                    VALUES (op.request_id, held.key_id, held.account_id, held.endpoint, held.model,
                        held.month, op.status, held.created_at, op.at, op.input_tokens, op.output_tokens,
                        op.cache_creation_tokens, op.cache_read_tokens, charged, shortfall_uc)
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
