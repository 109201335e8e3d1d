"""PostgreSQL's concurrency functions (0014, 0016) again, for three things measured in
``benchmarks/flow.py`` over 10,000 distinct keys:

- **Plans that stay good when cached.** PL/pgSQL keeps a generic plan of each
  statement after a few calls. 0016's key comparison (``= key OR (key IS NULL AND
  column IS NULL)``) has no generic plan that walks the key index: the slot count
  read every limited run of the job (``Rows Removed by Filter: 10000``, 4 ms), and
  a claim of 32 runs took 100-150 ms. Each statement that reads one key's runs now
  comes twice, for a key and for no key (``_per_key``), and each form's plan is the
  key index's: 5-7 ms for the same claim.
- **Outcomes in batches.** ``durable_finish_concurrency`` takes arrays (one per outcome
  column, as ``db.postgres.outcome_arrays`` builds them) and returns the ids it
  recorded, so a worker writes the outcomes of a batch of limited runs in one call
  instead of one call (and commit) each; ``durable_claim_concurrency`` takes the same
  arrays, and writes them before it claims.
- **Keys locked without a table.** A key's lock (``flow.lock``) is a transaction-level
  advisory lock on PostgreSQL (``durable_flow_lock``) instead of an upsert of its
  ``FlowKey`` row: a claim of 10,000 new keys wrote 10,000 rows (and a new row
  version each time a key came back). The finished runs' keys are locked in the
  order of their locks' numbers, so two workers finishing runs of the same keys
  never wait for each other in a cycle; a candidate's key is only tried
  (``durable_flow_try_lock``): a key another worker holds is that worker's to claim
  or free, so this claim moves on instead of waiting (it could otherwise wait for
  a worker that waits for one of its own keys).

The steps and their order are otherwise 0014's (``flow``'s, for runs with a
concurrency limit and no throttle).
"""

import importlib
from typing import Any

from django.db import migrations

previous = importlib.import_module("django_durable_jobs.migrations.0016_concurrency_key_indexable")
first = importlib.import_module("django_durable_jobs.migrations.0014_concurrency_functions")

#: The outcome arrays, in ``db.postgres.OUTCOME_COLUMNS`` order, then the runs' ids,
#: lease owners, job names and concurrency keys ('' for none): a test compares them
#: with ``OUTCOME_COLUMNS``.
OUTCOME_PARAMS = """
    p_status text[], p_result text[], p_finished_at timestamptz[], p_wake_at timestamptz[],
    p_error_code text[], p_error text[], p_error_type text[], p_traceback text[],
    p_ids uuid[], p_owners text[], p_jobs text[], p_keys text[]"""
OUTCOME_ARGS = (
    "p_status, p_result, p_finished_at, p_wake_at, p_error_code, p_error, p_error_type, "
    "p_traceback, p_ids, p_owners, p_jobs, p_keys"
)


def _per_key(statement: str, key: str) -> str:
    """``statement`` (which compares ``r.concurrency_key @KEY@``) for a key and for no
    key: one plan each, both through the key index, cached or not."""
    return (
        f"IF {key} IS NULL THEN\n{statement.replace('@KEY@', 'IS NULL')}\n"
        f"ELSE\n{statement.replace('@KEY@', f'= {key}')}\nEND IF;"
    )


#: The locks of flow keys (``flow.lock``): transaction-level advisory locks, in a space
#: of their own (the two-number form, first number 'Jobs' in ASCII), numbered by a
#: hash of the key. Two keys with one number share a lock: that serialises them and
#: never lets a limit be exceeded.
LOCKS = """
CREATE OR REPLACE FUNCTION durable_flow_lock_id(p_job text, p_kind text, p_key text)
RETURNS integer AS $$
    SELECT hashtext(p_job || chr(31) || p_kind || chr(31) || p_key)
$$ LANGUAGE sql IMMUTABLE;

CREATE OR REPLACE FUNCTION durable_flow_lock(p_job text, p_kind text, p_key text)
RETURNS void AS $$
    SELECT pg_advisory_xact_lock(1248813683, durable_flow_lock_id(p_job, p_kind, p_key))
$$ LANGUAGE sql;

CREATE OR REPLACE FUNCTION durable_flow_try_lock(p_job text, p_kind text, p_key text)
RETURNS boolean AS $$
    SELECT pg_try_advisory_xact_lock(1248813683, durable_flow_lock_id(p_job, p_kind, p_key))
$$ LANGUAGE sql
"""

# The key's oldest held run goes (flow.free_slot).
_LET_GO = """UPDATE {runs} SET wake_at = p_now
            WHERE id = (
                SELECT r.id FROM {runs} r
                WHERE r.job_name = done_run.job_name AND r.concurrency_key @KEY@
                    AND r.concurrency_limit IS NOT NULL
                    AND r.status IN ('queued', 'sleeping', 'waiting') AND r.wake_at IS NULL
                ORDER BY r.created_at
                LIMIT 1);"""

FINISH = (
    """
CREATE OR REPLACE FUNCTION durable_finish_concurrency(
    p_now timestamptz,"""
    + OUTCOME_PARAMS
    + """
) RETURNS uuid[] AS $$
DECLARE
    done_run record;
    recorded uuid[] := '{}';
BEGIN
    -- The keys' locks first (flow.lock), in the order of their numbers: two workers
    -- finishing runs of the same keys never wait for each other in a cycle.
    PERFORM durable_flow_lock(l.job_name, 'concurrency', l.key)
    FROM (
        SELECT DISTINCT u.job_name, u.key,
            durable_flow_lock_id(u.job_name, 'concurrency', u.key) AS number
        FROM unnest(p_jobs, p_keys) AS u(job_name, key)
        ORDER BY number
    ) AS l;
    FOR done_run IN
        UPDATE {runs} r SET
            status = u.status, result = u.result::jsonb, finished_at = u.finished_at,
            wake_at = u.wake_at, error_code = u.error_code, error = u.error,
            error_type = u.error_type, traceback = u.traceback,
            lease_owner = '', lease_expires_at = NULL
        FROM unnest(p_ids, p_owners, p_status, p_result, p_finished_at, p_wake_at,
            p_error_code, p_error, p_error_type, p_traceback)
            AS u(id, owner, status, result, finished_at, wake_at, error_code, error,
                error_type, traceback)
        WHERE r.id = u.id AND r.lease_owner = u.owner AND r.status = 'running'
            AND r.concurrency_limit IS NOT NULL
        RETURNING r.id, r.job_name, r.concurrency_key
    LOOP
        recorded := recorded || done_run.id;
        """
    + _per_key(_LET_GO, "done_run.concurrency_key")
    + """
    END LOOP;
    RETURN recorded;
END
$$ LANGUAGE plpgsql
"""
)

_BEST = """SELECT r.id, r.status, r.started_at INTO best FROM {runs} r
        WHERE r.job_name = cand.job_name AND r.concurrency_key @KEY@
            AND r.concurrency_limit = cand.concurrency_limit AND r.throttle_limit IS NULL
            AND r.status IN ('queued', 'sleeping', 'waiting') AND r.wake_at <= p_now
            AND (p_queues IS NULL OR r.queue = ANY (p_queues))
            AND r.id <> ALL (chosen)  -- locked by this call already: SKIP LOCKED keeps it
        ORDER BY r.priority DESC, r.wake_at
        LIMIT 1
        FOR UPDATE SKIP LOCKED;"""

# The key's slots (flow.slots): running, or cancelled and not yet stopped.
_SLOTS = """SELECT count(*) INTO taken FROM {runs} r
        WHERE r.job_name = cand.job_name AND r.concurrency_key @KEY@
            AND r.concurrency_limit IS NOT NULL
            AND r.status IN ('running', 'cancelled')
            AND (r.status = 'running'
                OR (r.lease_expires_at >= p_now AND r.lease_owner <> ''));"""

# Saturated: hold the key's runnable runs until a slot frees (flow.hold).
_HOLD = """UPDATE {runs} r SET wake_at = NULL
            WHERE r.job_name = cand.job_name AND r.concurrency_key @KEY@
                AND r.concurrency_limit IS NOT NULL
                AND r.status IN ('queued', 'sleeping', 'waiting') AND r.wake_at <= p_now
                AND r.id <> ALL (chosen);"""

CLAIM = (
    """
CREATE OR REPLACE FUNCTION durable_claim_concurrency(
    p_now timestamptz, p_owner text, p_lease_until timestamptz, p_queues text[],
    p_limit integer, p_candidates integer,"""
    + OUTCOME_PARAMS
    + """
) RETURNS TABLE (
    recorded uuid[], throttled boolean, claimed_from text, fresh boolean, run {runs}
) AS $$
DECLARE
    cand record;
    best record;
    done text[] := '{}';
    k text;
    taken integer;
    n integer := 0;
    recorded_then uuid[] := '{}';
    throttled_seen boolean := false;
    chosen uuid[] := '{}';
    chosen_keys text[] := '{}';
    chosen_from text[] := '{}';
    chosen_fresh boolean[] := '{}';
BEGIN
    -- First the outcomes of limited runs, if any; then one row per run claimed; last
    -- one row of flags: the ids of the outcomes recorded, and whether runnable runs
    -- under a throttle were seen (flow.claim_limited's).
    IF cardinality(p_ids) > 0 THEN
        recorded_then := durable_finish_concurrency(p_now, """
    + OUTCOME_ARGS
    + """);
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
        -- The key's lock first (flow.lock): nothing of the key is read before it. A key
        -- another worker holds is left to it: it is that worker's to claim or free.
        IF NOT durable_flow_try_lock(cand.job_name, 'concurrency',
                coalesce(cand.concurrency_key, '')) THEN
            done := done || k;
            CONTINUE;
        END IF;
        """
    + _per_key(_BEST, "cand.concurrency_key")
    + """
        IF NOT FOUND THEN
            done := done || k;  -- taken or held by other workers meanwhile
            CONTINUE;
        END IF;
        """
    + _per_key(_SLOTS, "cand.concurrency_key")
    + """
        -- ... and those this call chose already.
        taken := taken + coalesce(cardinality(array_positions(chosen_keys, k)), 0);
        IF taken >= cand.concurrency_limit THEN
            """
    + _per_key(_HOLD, "cand.concurrency_key")
    + """
            done := done || k;
            CONTINUE;
        END IF;
        chosen := chosen || best.id;
        chosen_keys := chosen_keys || k;
        chosen_from := chosen_from || best.status::text;
        chosen_fresh := chosen_fresh || (best.started_at IS NULL);
        n := n + 1;
    END LOOP;
    -- The runs chosen, taken in one statement (each is locked since it was chosen).
    RETURN QUERY
        WITH took AS (
            UPDATE {runs} r SET
                attempt = CASE WHEN r.status = 'queued' THEN r.attempt + 1 ELSE r.attempt END,
                status = 'running',
                started_at = COALESCE(r.started_at, p_now),
                lease_owner = p_owner,
                lease_expires_at = p_lease_until
            FROM unnest(chosen, chosen_from, chosen_fresh) WITH ORDINALITY
                AS c(id, was, first, position)
            WHERE r.id = c.id
            RETURNING r AS row, c.was, c.first, c.position
        )
        SELECT NULL::uuid[], NULL::boolean, took.was, took.first, took.row
        FROM took ORDER BY took.position;
    recorded := recorded_then;
    throttled := throttled_seen;
    claimed_from := NULL;
    fresh := NULL;
    run := NULL;
    RETURN NEXT;
END
$$ LANGUAGE plpgsql
"""
)

_ARRAYS = (
    "text[], text[], timestamptz[], timestamptz[], text[], text[], text[], text[], uuid[], "
    "text[], text[], text[]"
)
SIGNATURES = (
    f"durable_claim_concurrency(timestamptz, text, timestamptz, text[], integer, integer, "
    f"{_ARRAYS})",
    f"durable_finish_concurrency(timestamptz, {_ARRAYS})",
    "durable_flow_try_lock(text, text, text)",
    "durable_flow_lock(text, text, text)",
    "durable_flow_lock_id(text, text, text)",
)


def forwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for signature in first.SIGNATURES:  # 0016's, which took one outcome
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {signature}")
    # The key locks are advisory: no table but the runs'.
    runs = schema_editor.quote_name(apps.get_model("django_durable_jobs", "JobRun")._meta.db_table)
    for function in (LOCKS, FINISH, CLAIM):
        schema_editor.execute(function.replace("{runs}", runs))


def backwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for signature in SIGNATURES:
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {signature}")
    previous.forwards(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("django_durable_jobs", "0016_concurrency_key_indexable")]
    operations = [migrations.RunPython(forwards, backwards)]
