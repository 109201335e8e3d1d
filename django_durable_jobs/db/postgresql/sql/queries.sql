-- The statements of PostgreSQL's fast path (psycopg 3), as templates: `{table}`,
-- `{columns}` and the like are filled in once per process from the models' fields
-- (claims.py, inserts.py), so a new column takes no edit here. `$1`... are the
-- parameters of the prepared statement; `%s` those Django's cursor sends.
-- One statement (or part of one) a section; each section starts with its name
-- between dashes.

-- claim --
-- The claim: one round trip and one commit per run. {outcomes} records the previous
-- runs' outcomes first (claim_outcomes, or nothing); the claimed runs come back one a
-- row, with the ids of the outcomes recorded and {limited_due} (claim_limited_due, or
-- NULL) on every row, and one row of NULLs when nothing was claimed.
-- $1 now, $2 how many, $3 the worker's lease owner, $4 the lease's end, $5 the
-- worker's queues.
WITH {outcomes}
picked AS (
    {picked}
    LIMIT $2
),
claimed AS (
    UPDATE {table} AS run SET
        status = 'running',
        attempt = CASE WHEN picked.status = 'queued' THEN run.attempt + 1 ELSE run.attempt END,
        started_at = COALESCE(run.started_at, $1),
        lease_owner = $3,
        lease_expires_at = $4
    FROM picked WHERE run.id = picked.id
    RETURNING {columns}, picked.status AS claimed_from, picked.started_at IS NULL AS fresh
)
SELECT {recorded}, {limited_due}, claimed.* FROM (SELECT 1) AS one LEFT JOIN claimed ON true;

-- claim_picked --
-- One part of the runs a claim takes (claims.py joins them with UNION ALL): those
-- above the default priority, those at it, those below ({priority}), each part locked
-- as it is read and read only while the claim wants more (the parts run in turn, and
-- the claim's LIMIT stops them). The claim's indexes keep a priority's parked runs
-- (sleeping, waiting, delayed) after its due ones, and a wake time is a bound of the
-- scan only under one priority: read as one range, a claim that found fewer due runs
-- than it wanted read every parked run of its queue (50 ms behind a million). At the
-- default priority the read stops at the first parked run; above and below it, at the
-- end of their parked runs.
SELECT * FROM (SELECT id, status, started_at FROM {table}
    WHERE status IN ('queued', 'sleeping', 'waiting') AND wake_at <= $1 {queues}
        AND priority {priority}
        -- runs under a limit are claimed one key at a time (db/flow/limits.py)
        AND concurrency_limit IS NULL AND throttle_limit IS NULL
    ORDER BY priority DESC, wake_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED) AS {part}

-- claim_outcomes --
-- The outcomes of the worker's previous runs, written with its next claim: one JSON
-- document ($6), an object per run (claims.py `outcome_document`), each fenced by its
-- own lease owner: a run whose lease was lost is not written. The runs are found by
-- their ids (the ANY: an index probe each): the planner takes a document for 100 rows
-- and, where its statistics say few runs are running, read every running run (every
-- run of a small table) to join them, at each write.
done AS (
    UPDATE {table} AS run SET {sets},
        lease_owner = '', lease_expires_at = NULL
    FROM json_to_recordset(${first}::json) AS o({record}, run_id uuid, owner text)
    WHERE run.id = o.run_id AND run.lease_owner = o.owner AND run.status = 'running'
        AND run.id = ANY(ARRAY(
            SELECT i.run_id FROM json_to_recordset(${first}::json) AS i(run_id uuid)))
    RETURNING run.id
),

-- claim_limited_due --
-- Whether runs under a flow-control limit are due now (of the worker's queues), an
-- index probe of durable_run_limited: the worker calls the flow claim only then.
EXISTS (
    SELECT 1 FROM {table} WHERE status IN ('queued', 'sleeping', 'waiting')
        AND wake_at <= $1 {queues}
        AND (concurrency_limit IS NOT NULL OR throttle_limit IS NOT NULL)
);

-- claim_versions --
-- Added to the claim's filter (and to claim_limited_due's) while workers with other
-- code are about, a rolling deploy (db/executable.py): runs of the jobs and versions
-- this worker registers (${mine}, each "<version>:<name>"), or runs of those no live
-- worker registers (not in ${anyone}) runnable since ${overdue}, UNKNOWN_JOB_GRACE
-- ago: the worker that takes them fails them (X_JOB_UNKNOWN).
AND ((job_version::text || ':' || job_name) = ANY(${mine}::text[])
    OR ((job_version::text || ':' || job_name) <> ALL(${anyone}::text[])
        AND wake_at <= ${overdue}));

-- claim_paused --
-- Added to the claim's filter (and to claim_limited_due's) while queues or jobs are
-- paused (db/paused.py): none of the queues in ${queues} nor of the jobs in ${jobs}.
-- NOT (= ANY), not <> ALL: see durable_claim_concurrency in schema.sql.
AND NOT (queue = ANY(${queues}::text[]) OR job_name = ANY(${jobs}::text[]));

-- insert_run --
-- One run (`enqueue`), every column, prepared once per connection: planning a
-- 30-column INSERT and building Django's SQL for it cost more than running it. The
-- columns come in one JSON object (inserts.py `run_document`): one text parameter,
-- where one per column had psycopg's client-side cursor write each into the
-- `EXECUTE` in Python (the document costs a third of what the parameters did).
INSERT INTO {table} ({columns})
SELECT {columns} FROM json_to_record($1::json) AS r({record});

-- insert_runs --
-- The runs of one `enqueue_many` call: what differs between them in one JSON array of
-- [id, args, kwargs, microseconds after the first run's wake time], read by the server
-- in one go; every other column sent once.
INSERT INTO {table} ({columns})
SELECT {values}
FROM jsonb_array_elements(%s::jsonb) AS r(call);

-- insert_steps --
-- Step records of a batch of async runs, each written only while its owner holds its
-- run's lease and the run is running: one statement and one commit for the batch;
-- returns the (run, name) of the rows written. The records come in one JSON document
-- (inserts.py `step_document`), an object per record with its owner. The runs are
-- found by their ids, as claim_outcomes finds them.
INSERT INTO {steps} ({columns})
SELECT {values} FROM json_to_recordset($1::json) AS u({record}, owner text)
JOIN {table} AS run ON run.id = u.{run} AND run.lease_owner = u.owner AND run.status = 'running'
    AND run.id = ANY(ARRAY(SELECT i.{run} FROM json_to_recordset($1::json) AS i({run} uuid)))
RETURNING {run}, {name};

-- purge_batch --
-- One batch of a purge (db/purge.py says which runs and why): the oldest runs of one
-- finished status that finished before the cutoff and from where the last
-- batch stopped, locked as they are chosen (SKIP LOCKED: a run an operator is retrying
-- right now is left for the next purge), then what references them, the runs last, in
-- one statement. Their children lose their parent (SET_NULL); a child in the batch is
-- not updated too (a row is written once a statement). The runs are deleted by their
-- row's address (ctid, stable while the batch's lock holds): the index scan that chose
-- them found it, and a lookup by id would read a random page of the primary key per
-- run. Returns how many runs went and the finished time of the newest. The foreign
-- keys are checked at commit.
WITH batch AS (
    SELECT run.id, run.ctid AS tid FROM {runs} AS run
    WHERE run.status = %(status)s AND run.finished_at < %(cutoff)s
        AND run.finished_at >= %(after)s AND run.lease_owner = ''
        AND NOT EXISTS (
            SELECT 1 FROM {runs} AS parent WHERE parent.id = run.parent_id
                AND (parent.status <> ALL(%(finished)s) OR parent.lease_owner <> '')
        )
    ORDER BY run.finished_at
    LIMIT %(limit)s
    FOR UPDATE OF run SKIP LOCKED
),
{owned}
orphans AS (
    UPDATE {runs} SET parent_id = NULL
    WHERE parent_id IN (SELECT id FROM batch) AND id NOT IN (SELECT id FROM batch)
),
gone AS (
    DELETE FROM {runs} WHERE ctid = ANY(ARRAY(SELECT tid FROM batch)) RETURNING finished_at
)
SELECT count(*), max(finished_at) FROM gone;
