-- PostgreSQL's storage parameters of django_durable_jobs's hot tables: autovacuum per
-- table. Set by the migrations (db/postgresql/sql.py `set_storage`, reset by
-- `reset_storage`); a test checks that a migrated database has these. One ALTER TABLE
-- a section, named after its table. Why these values: docs/explanation/retention.md.
--
-- PostgreSQL's defaults vacuum a table once a fifth of its rows are dead
-- (autovacuum_vacuum_scale_factor 0.2): with millions of finished runs kept, the few
-- thousand live runs that every claim and finish rewrite leave hundreds of thousands
-- of dead rows before a vacuum comes (benchmarks/README.md, "Dead tuples").

-- django_durable_jobs_jobrun --
-- Each run is written three times or more (enqueue, claim, finish): vacuum at 1% of
-- the table dead (and at least 1,000 rows), analyze at 2%.
ALTER TABLE django_durable_jobs_jobrun SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02
);

-- django_durable_jobs_steprecord --
-- Step records are inserted, then updated once or twice (a sleep, a wait, a retry):
-- the same, and a vacuum after inserts at 5% new rows, so the visibility map
-- follows.
ALTER TABLE django_durable_jobs_steprecord SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);
