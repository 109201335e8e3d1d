-- PostgreSQL's functions, triggers and statistics of django_durable_jobs, as the database holds them.
--
-- Loaded by the migrations (db/postgresql/sql.py); a test checks that a migrated
-- database's definitions equal these. One statement a section; each section starts
-- with its name between dashes.

-- durable_jobs_notify_enqueued --
-- An idle worker listening on the channel durable_jobs learns that runs were
-- enqueued: one notification per INSERT statement, sent on commit.
CREATE OR REPLACE FUNCTION durable_jobs_notify_enqueued()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify('durable_jobs', 'enqueued');
    RETURN NULL;
END
$function$;

-- durable_jobs_notify_woken --
-- An idle worker learns that a run became runnable now (a published event, a
-- finished child, a retry without backoff, a released run, an operator's wake):
-- every such write sets wake_at to now on a runnable run. Identical notifications of
-- one transaction are sent once.
CREATE OR REPLACE FUNCTION durable_jobs_notify_woken()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify('durable_jobs', 'woken');
    RETURN NULL;
END
$function$;

-- durable_jobs_notify_finished --
-- A process waiting for a run's result (JobRun.wait) learns that the run finished:
-- the run's id on the channel durable_jobs_finished, sent on commit. Workers do not
-- listen there.
CREATE OR REPLACE FUNCTION durable_jobs_notify_finished()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify('durable_jobs_finished', NEW.id::text);
    RETURN NULL;
END
$function$;

-- durable_jobs_notify_published --
-- An idle worker learns that an event was published: "event <id>" on the channel
-- durable_jobs, sent on commit. The worker wakes the runs that parked while the
-- publisher's transaction was open (verbs/events.py, wake_late), so the publisher
-- pays no statement after its commit.
CREATE OR REPLACE FUNCTION durable_jobs_notify_published()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify('durable_jobs', 'event ' || NEW.id::text);
    RETURN NULL;
END
$function$;

-- durable_flow_lock_id --
-- The number of a flow-control key's advisory lock: (job, kind, key) hashed.
CREATE OR REPLACE FUNCTION durable_flow_lock_id(p_job text, p_kind text, p_key text)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT hashtext(p_job || chr(31) || p_kind || chr(31) || p_key)
$function$;

-- durable_flow_lock --
-- Lock one flow-control key until the transaction ends (db/flow/keys.py `lock`,
-- `Dialect.lock_key`). 1248813683 is this app's advisory-lock class.
CREATE OR REPLACE FUNCTION durable_flow_lock(p_job text, p_kind text, p_key text)
 RETURNS void
 LANGUAGE sql
AS $function$
    SELECT pg_advisory_xact_lock(1248813683, durable_flow_lock_id(p_job, p_kind, p_key))
$function$;

-- durable_flow_try_lock --
-- The same lock, not waited for: a key another worker holds is left to it.
CREATE OR REPLACE FUNCTION durable_flow_try_lock(p_job text, p_kind text, p_key text)
 RETURNS boolean
 LANGUAGE sql
AS $function$
    SELECT pg_try_advisory_xact_lock(1248813683, durable_flow_lock_id(p_job, p_kind, p_key))
$function$;

-- durable_finish_concurrency --
-- Record the outcomes of runs under a concurrency limit (unnest arrays, one row a run,
-- fenced by each run's lease) and let one held run of each freed key go: a batch of
-- outcomes in one call (db/postgresql/flow.py `finish_concurrency`).
CREATE OR REPLACE FUNCTION durable_finish_concurrency(p_now timestamp with time zone, p_status text[], p_result text[], p_finished_at timestamp with time zone[], p_wake_at timestamp with time zone[], p_error_code text[], p_error text[], p_error_type text[], p_traceback text[], p_ids uuid[], p_owners text[], p_jobs text[], p_keys text[])
 RETURNS uuid[]
 LANGUAGE plpgsql
AS $function$
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
        UPDATE "django_durable_jobs_jobrun" r SET
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
        IF done_run.concurrency_key IS NULL THEN
            UPDATE "django_durable_jobs_jobrun" SET wake_at = p_now
            WHERE id = (
                SELECT r.id FROM "django_durable_jobs_jobrun" r
                WHERE r.job_name = done_run.job_name AND r.concurrency_key IS NULL
                    AND r.concurrency_limit IS NOT NULL
                    AND r.status IN ('queued', 'sleeping', 'waiting') AND r.wake_at IS NULL
                ORDER BY r.created_at
                LIMIT 1);
        ELSE
            UPDATE "django_durable_jobs_jobrun" SET wake_at = p_now
            WHERE id = (
                SELECT r.id FROM "django_durable_jobs_jobrun" r
                WHERE r.job_name = done_run.job_name AND r.concurrency_key = done_run.concurrency_key
                    AND r.concurrency_limit IS NOT NULL
                    AND r.status IN ('queued', 'sleeping', 'waiting') AND r.wake_at IS NULL
                ORDER BY r.created_at
                LIMIT 1);
        END IF;
    END LOOP;
    RETURN recorded;
END
$function$;

-- durable_claim_concurrency --
-- Claim up to p_limit runs under a concurrency limit, best first, one key at a time
-- with its lock; a saturated key's due runs are held (wake_at NULL) until a slot
-- frees. Outcomes of earlier runs (p_ids...) are recorded first, in the same call.
-- Returns a row per run claimed, then one row of flags: the outcomes recorded and
-- whether runs under a throttle were seen (claimed by db/flow/limits.py instead).
-- p_mine, p_anyone, p_overdue: NULL, or the jobs and versions this worker may take
-- during a rolling deploy (db/executable.py, queries.sql claim_versions).
-- p_paused_queues, p_paused_jobs: NULL, or the queues and jobs paused, whose runs are
-- left where they are (db/paused.py).
CREATE OR REPLACE FUNCTION durable_claim_concurrency(p_now timestamp with time zone, p_owner text, p_lease_until timestamp with time zone, p_queues text[], p_limit integer, p_candidates integer, p_status text[], p_result text[], p_finished_at timestamp with time zone[], p_wake_at timestamp with time zone[], p_error_code text[], p_error text[], p_error_type text[], p_traceback text[], p_ids uuid[], p_owners text[], p_jobs text[], p_keys text[], p_mine text[], p_anyone text[], p_overdue timestamp with time zone, p_paused_queues text[], p_paused_jobs text[])
 RETURNS TABLE(recorded uuid[], throttled boolean, claimed_from text, fresh boolean, run django_durable_jobs_jobrun)
 LANGUAGE plpgsql
AS $function$
DECLARE
    candidates refcursor;
    part text;
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
        recorded_then := durable_finish_concurrency(p_now, p_status, p_result, p_finished_at, p_wake_at, p_error_code, p_error, p_error_type, p_traceback, p_ids, p_owners, p_jobs, p_keys);
    END IF;
    -- The candidates, best first, a priority range at a time as the claim reads
    -- (queries.sql claim_picked): at the default priority the read stops at the
    -- queue's first parked run instead of walking all of them. Built for the call and
    -- planned with its values (EXECUTE): one queue compared by equality, the filters
    -- of a rolling deploy and of pauses only when they are set. A statement planned
    -- once for every call kept "p_queues IS NULL OR r.queue = ..." as a filter (read
    -- past every other queue's due runs), and a filter on pauses, even one that keeps
    -- every run, made it estimate one row, read every due run and sort them; with
    -- "= ANY" for one queue a claim read and sorted the queue's whole backlog (65 ms
    -- behind 100,000 queued runs).
    part := 'SELECT r.job_name, r.concurrency_key, r.concurrency_limit, r.throttle_limit'
        || ' FROM "django_durable_jobs_jobrun" r'
        || ' WHERE r.status IN (''queued'', ''sleeping'', ''waiting'') AND r.wake_at <= $1'
        || CASE WHEN p_queues IS NULL THEN ''
            WHEN cardinality(p_queues) = 1 THEN ' AND r.queue = ($2)[1]'
            ELSE ' AND r.queue = ANY ($2)' END
        || CASE WHEN p_mine IS NULL THEN ''
            ELSE ' AND ((r.job_version::text || '':'' || r.job_name) = ANY ($3)'
                || ' OR ((r.job_version::text || '':'' || r.job_name) <> ALL ($4)'
                || ' AND r.wake_at <= $5))' END
        || CASE WHEN p_paused_queues IS NULL AND p_paused_jobs IS NULL THEN ''
            ELSE ' AND NOT (r.queue = ANY (coalesce($6, ''{}''))'
                || ' OR r.job_name = ANY (coalesce($7, ''{}'')))' END;
    OPEN candidates FOR EXECUTE
        'SELECT * FROM (' || part || ' AND r.priority > 0'
            || ' ORDER BY r.priority DESC, r.wake_at LIMIT $8) AS above'
        || ' UNION ALL SELECT * FROM (' || part || ' AND r.priority = 0'
            || ' ORDER BY r.priority DESC, r.wake_at LIMIT $8) AS at'
        || ' UNION ALL SELECT * FROM (' || part || ' AND r.priority < 0'
            || ' ORDER BY r.priority DESC, r.wake_at LIMIT $8) AS below'
        || ' LIMIT $8'
        USING p_now, p_queues, p_mine, p_anyone, p_overdue, p_paused_queues, p_paused_jobs,
            p_candidates;
    LOOP
        FETCH candidates INTO cand;
        EXIT WHEN NOT FOUND;
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
        IF cand.concurrency_key IS NULL THEN
            SELECT r.id, r.status, r.started_at INTO best FROM "django_durable_jobs_jobrun" r
        WHERE r.job_name = cand.job_name AND r.concurrency_key IS NULL
            AND r.concurrency_limit = cand.concurrency_limit AND r.throttle_limit IS NULL
            AND r.status IN ('queued', 'sleeping', 'waiting') AND r.wake_at <= p_now
            AND (p_queues IS NULL OR r.queue = ANY (p_queues))
            AND (p_mine IS NULL OR (r.job_version::text || ':' || r.job_name) = ANY (p_mine)
                OR ((r.job_version::text || ':' || r.job_name) <> ALL (p_anyone)
                    AND r.wake_at <= p_overdue))
            AND NOT (r.queue = ANY (coalesce(p_paused_queues, '{}'))
                OR r.job_name = ANY (coalesce(p_paused_jobs, '{}')))
            AND r.id <> ALL (chosen)  -- locked by this call already: SKIP LOCKED keeps it
        ORDER BY r.priority DESC, r.wake_at
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        ELSE
            SELECT r.id, r.status, r.started_at INTO best FROM "django_durable_jobs_jobrun" r
        WHERE r.job_name = cand.job_name AND r.concurrency_key = cand.concurrency_key
            AND r.concurrency_limit = cand.concurrency_limit AND r.throttle_limit IS NULL
            AND r.status IN ('queued', 'sleeping', 'waiting') AND r.wake_at <= p_now
            AND (p_queues IS NULL OR r.queue = ANY (p_queues))
            AND (p_mine IS NULL OR (r.job_version::text || ':' || r.job_name) = ANY (p_mine)
                OR ((r.job_version::text || ':' || r.job_name) <> ALL (p_anyone)
                    AND r.wake_at <= p_overdue))
            AND NOT (r.queue = ANY (coalesce(p_paused_queues, '{}'))
                OR r.job_name = ANY (coalesce(p_paused_jobs, '{}')))
            AND r.id <> ALL (chosen)  -- locked by this call already: SKIP LOCKED keeps it
        ORDER BY r.priority DESC, r.wake_at
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        END IF;
        IF NOT FOUND THEN
            done := done || k;  -- taken or held by other workers meanwhile
            CONTINUE;
        END IF;
        IF cand.concurrency_key IS NULL THEN
            SELECT count(*) INTO taken FROM "django_durable_jobs_jobrun" r
        WHERE r.job_name = cand.job_name AND r.concurrency_key IS NULL
            AND r.concurrency_limit IS NOT NULL
            AND r.status IN ('running', 'cancelled')
            AND (r.status = 'running'
                OR (r.lease_expires_at >= p_now AND r.lease_owner <> ''));
        ELSE
            SELECT count(*) INTO taken FROM "django_durable_jobs_jobrun" r
        WHERE r.job_name = cand.job_name AND r.concurrency_key = cand.concurrency_key
            AND r.concurrency_limit IS NOT NULL
            AND r.status IN ('running', 'cancelled')
            AND (r.status = 'running'
                OR (r.lease_expires_at >= p_now AND r.lease_owner <> ''));
        END IF;
        -- ... and those this call chose already.
        taken := taken + coalesce(cardinality(array_positions(chosen_keys, k)), 0);
        IF taken >= cand.concurrency_limit THEN
            IF cand.concurrency_key IS NULL THEN
            UPDATE "django_durable_jobs_jobrun" r SET wake_at = NULL
            WHERE r.job_name = cand.job_name AND r.concurrency_key IS NULL
                AND r.concurrency_limit IS NOT NULL
                AND r.status IN ('queued', 'sleeping', 'waiting') AND r.wake_at <= p_now
                AND r.id <> ALL (chosen);
        ELSE
            UPDATE "django_durable_jobs_jobrun" r SET wake_at = NULL
            WHERE r.job_name = cand.job_name AND r.concurrency_key = cand.concurrency_key
                AND r.concurrency_limit IS NOT NULL
                AND r.status IN ('queued', 'sleeping', 'waiting') AND r.wake_at <= p_now
                AND r.id <> ALL (chosen);
        END IF;
            done := done || k;
            CONTINUE;
        END IF;
        chosen := chosen || best.id;
        chosen_keys := chosen_keys || k;
        chosen_from := chosen_from || best.status::text;
        chosen_fresh := chosen_fresh || (best.started_at IS NULL);
        n := n + 1;
    END LOOP;
    CLOSE candidates;
    -- The runs chosen, taken in one statement (each is locked since it was chosen).
    RETURN QUERY
        WITH took AS (
            UPDATE "django_durable_jobs_jobrun" r SET
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
$function$;

-- durable_jobs_enqueued --
-- An INSERT of runs notifies once, whatever the number of rows.
CREATE TRIGGER durable_jobs_enqueued AFTER INSERT ON django_durable_jobs_jobrun
    FOR EACH STATEMENT EXECUTE FUNCTION durable_jobs_notify_enqueued();

-- durable_jobs_woken --
-- A runnable run whose wake time is now or past, in the same statement as the write.
CREATE TRIGGER durable_jobs_woken AFTER UPDATE OF wake_at, status ON django_durable_jobs_jobrun
    FOR EACH ROW WHEN (NEW.status IN ('queued', 'sleeping', 'waiting') AND NEW.wake_at <= now())
    EXECUTE FUNCTION durable_jobs_notify_woken();

-- durable_jobs_published --
-- Every published event, in the publisher's transaction.
CREATE TRIGGER durable_jobs_published AFTER INSERT ON django_durable_jobs_event
    FOR EACH ROW EXECUTE FUNCTION durable_jobs_notify_published();

-- durable_jobs_finished --
-- A run that became finished (succeeded, failed, cancelled, skipped) in this write.
CREATE TRIGGER durable_jobs_finished AFTER UPDATE OF status ON django_durable_jobs_jobrun
    FOR EACH ROW WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled', 'skipped')
        AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION durable_jobs_notify_finished();

-- durable_run_queue_status --
-- The runs per queue and status, as ANALYZE samples them: the planner's estimate of
-- a queue's queued, sleeping or waiting runs (observe/counts.py) where counting them
-- would read millions. Without it the planner multiplies the two columns' shares, as
-- if independent: a queue that holds a tenth of the runs and all the queued ones
-- would be estimated to hold a tenth of them.
CREATE STATISTICS IF NOT EXISTS durable_run_queue_status (mcv) ON queue, status
    FROM django_durable_jobs_jobrun;
