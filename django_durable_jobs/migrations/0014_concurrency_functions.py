"""On PostgreSQL, runs under a concurrency limit claimed and finished in one function
call each (or both in one, when the worker records an outcome with its next claim).

``flow.claim_limited`` takes a limited run in a transaction of its own: lock the key's
``FlowKey`` row, read the key's best run, count its slots, then take the run or hold
the key's runs; recording its outcome locks the key again, writes, and lets the key's
oldest held run go (``flow.free_slot``). Each statement needs the previous one's locks
(READ COMMITTED: each sees what committed before it started), so they cannot share
one SQL statement; in a PL/pgSQL function they share one round trip. The steps and
their order are ``flow``'s, for runs with a concurrency limit and no throttle. The
outcome's columns are ``db.postgres.OUTCOME_COLUMNS``, in order (a test compares them
with these functions' parameters).
"""

from typing import Any

from django.db import migrations

FINISH = """
CREATE OR REPLACE FUNCTION durable_finish_concurrency(
    p_id uuid, p_owner text, p_now timestamptz,
    p_status text, p_result jsonb, p_finished_at timestamptz, p_wake_at timestamptz,
    p_error_code text, p_error text, p_error_type text, p_traceback text
) RETURNS boolean AS $$
DECLARE
    run record;
    next_id uuid;
BEGIN
    SELECT r.job_name, r.concurrency_key INTO run FROM {runs} r
    WHERE r.id = p_id AND r.concurrency_limit IS NOT NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO {keys} (job_name, kind, key)
    VALUES (run.job_name, 'concurrency', coalesce(run.concurrency_key, ''))
    ON CONFLICT (job_name, kind, key) DO UPDATE SET kind = EXCLUDED.kind;
    UPDATE {runs} SET
        status = p_status, result = p_result, finished_at = p_finished_at,
        wake_at = p_wake_at, error_code = p_error_code, error = p_error,
        error_type = p_error_type, traceback = p_traceback,
        lease_owner = '', lease_expires_at = NULL
    WHERE id = p_id AND lease_owner = p_owner AND status = 'running';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT r.id INTO next_id FROM {runs} r
    WHERE r.job_name = run.job_name
        AND r.concurrency_key IS NOT DISTINCT FROM run.concurrency_key
        AND r.concurrency_limit IS NOT NULL
        AND r.status IN ('queued', 'sleeping', 'waiting') AND r.wake_at IS NULL
    ORDER BY r.created_at
    LIMIT 1;
    IF FOUND THEN
        UPDATE {runs} SET wake_at = p_now WHERE id = next_id;
    END IF;
    RETURN true;
END
$$ LANGUAGE plpgsql
"""

CLAIM = """
CREATE OR REPLACE FUNCTION durable_claim_concurrency(
    p_now timestamptz, p_owner text, p_lease_until timestamptz, p_queues text[],
    p_limit integer, p_candidates integer, p_finish_id uuid, p_finish_owner text,
    p_status text, p_result jsonb, p_finished_at timestamptz, p_wake_at timestamptz,
    p_error_code text, p_error text, p_error_type text, p_traceback text
) RETURNS TABLE (
    finished boolean, throttled boolean, claimed_from text, fresh boolean, run {runs}
) AS $$
DECLARE
    cand record;
    best record;
    done text[] := '{}';
    k text;
    taken integer;
    n integer := 0;
    finished_then boolean;
    throttled_seen boolean := false;
BEGIN
    -- First the previous run's outcome, if it is one of a limited run; then one row
    -- per run claimed; last one row of flags: whether the outcome was recorded, and
    -- whether runnable runs under a throttle were seen (flow.claim_limited's).
    IF p_finish_id IS NOT NULL THEN
        finished_then := durable_finish_concurrency(
            p_finish_id, p_finish_owner, p_now, p_status, p_result, p_finished_at,
            p_wake_at, p_error_code, p_error, p_error_type, p_traceback);
    END IF;
    FOR cand IN
        SELECT r.job_name, r.concurrency_key, r.concurrency_limit, r.throttle_limit
        FROM {runs} r
        WHERE r.status IN ('queued', 'sleeping', 'waiting') AND r.wake_at <= p_now
            AND (p_queues IS NULL OR r.queue = ANY (p_queues))
        ORDER BY r.priority DESC, r.wake_at
        LIMIT p_candidates
    LOOP
        -- A run under no limit first: it is the unlimited claim's (priority order).
        EXIT WHEN cand.concurrency_limit IS NULL AND cand.throttle_limit IS NULL;
        IF cand.throttle_limit IS NOT NULL THEN
            throttled_seen := true;
            CONTINUE;
        END IF;
        CONTINUE WHEN n >= p_limit;
        k := cand.job_name || chr(31) || coalesce(cand.concurrency_key, '')
            || chr(31) || cand.concurrency_limit;
        CONTINUE WHEN k = ANY (done);
        -- The key's lock first (flow.lock): nothing of the key is read before it.
        INSERT INTO {keys} (job_name, kind, key)
        VALUES (cand.job_name, 'concurrency', coalesce(cand.concurrency_key, ''))
        ON CONFLICT (job_name, kind, key) DO UPDATE SET kind = EXCLUDED.kind;
        SELECT r.id, r.status, r.started_at INTO best FROM {runs} r
        WHERE r.job_name = cand.job_name
            AND r.concurrency_key IS NOT DISTINCT FROM cand.concurrency_key
            AND r.concurrency_limit = cand.concurrency_limit AND r.throttle_limit IS NULL
            AND r.status IN ('queued', 'sleeping', 'waiting') AND r.wake_at <= p_now
            AND (p_queues IS NULL OR r.queue = ANY (p_queues))
        ORDER BY r.priority DESC, r.wake_at
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            done := done || k;  -- taken or held by other workers meanwhile
            CONTINUE;
        END IF;
        -- The key's slots (flow.slots): running, or cancelled and not yet stopped.
        SELECT count(*) INTO taken FROM {runs} r
        WHERE r.job_name = cand.job_name
            AND r.concurrency_key IS NOT DISTINCT FROM cand.concurrency_key
            AND r.concurrency_limit IS NOT NULL
            AND (r.status = 'running' OR (r.status = 'cancelled'
                AND r.lease_expires_at >= p_now AND r.lease_owner <> ''));
        IF taken >= cand.concurrency_limit THEN
            -- Saturated: hold the key's runnable runs until a slot frees (flow.hold).
            UPDATE {runs} SET wake_at = NULL
            WHERE job_name = cand.job_name
                AND concurrency_key IS NOT DISTINCT FROM cand.concurrency_key
                AND concurrency_limit IS NOT NULL
                AND status IN ('queued', 'sleeping', 'waiting') AND wake_at <= p_now;
            done := done || k;
            CONTINUE;
        END IF;
        UPDATE {runs} SET
            attempt = CASE WHEN status = 'queued' THEN attempt + 1 ELSE attempt END,
            status = 'running',
            started_at = COALESCE(started_at, p_now),
            lease_owner = p_owner,
            lease_expires_at = p_lease_until
        WHERE id = best.id
        RETURNING * INTO run;
        claimed_from := best.status;
        fresh := best.started_at IS NULL;
        RETURN NEXT;
        n := n + 1;
    END LOOP;
    finished := finished_then;
    throttled := throttled_seen;
    claimed_from := NULL;
    fresh := NULL;
    run := NULL;
    RETURN NEXT;
END
$$ LANGUAGE plpgsql
"""

SIGNATURES = (
    "durable_claim_concurrency(timestamptz, text, timestamptz, text[], integer, integer, "
    "uuid, text, text, jsonb, timestamptz, timestamptz, text, text, text, text)",
    "durable_finish_concurrency(uuid, text, timestamptz, text, jsonb, timestamptz, "
    "timestamptz, text, text, text, text)",
)


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    runs = quote(apps.get_model("django_durable_jobs", "JobRun")._meta.db_table)
    keys = quote(apps.get_model("django_durable_jobs", "FlowKey")._meta.db_table)
    for function in (FINISH, CLAIM):
        schema_editor.execute(function.replace("{runs}", runs).replace("{keys}", keys))


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for signature in SIGNATURES:
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {signature}")


class Migration(migrations.Migration):
    dependencies = [("django_durable_jobs", "0013_step_child")]
    operations = [migrations.RunPython(create, drop)]
