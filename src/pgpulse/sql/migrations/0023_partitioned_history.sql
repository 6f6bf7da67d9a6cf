-- pgpulse: nodes before this migration must stop
-- The history (pgpulse_runs) becomes a table partitioned by range of scheduled_for, one partition
-- a UTC day, so that the leader prunes a day by detaching and dropping its partition instead of
-- deleting its rows one by one and vacuuming after them (docs/benchmarks.md, scenario 11: a day
-- pruned in 0.02 s instead of 1.06 s, inserts no slower).
--
-- The partition key is scheduled_for: the one-run-per-occurrence key (job_id, scheduled_for)
-- WHERE kind = 'scheduled' holds it, so that unique index stays exactly what it was, enforced
-- across partitions (docs/design.md, invariant 4). The primary key must hold it too: it becomes
-- (id, scheduled_for). An id stays unique by construction: every id is drawn once from
-- pgpulse_runs_id_seq and a run's row is written under the id and scheduled_for of its
-- occurrence, never another; a statement that wrote ON CONFLICT (id) now writes
-- ON CONFLICT (id, scheduled_for). Nodes of earlier releases send ON CONFLICT (id), which no
-- longer matches a unique index: hence the marker above.
--
-- Every row is kept and none is copied: the existing table becomes the first partition,
-- pgpulse_runs_before, for every scheduled_for before the end of the day of this migration (or
-- of its latest row), and its indexes become the partitions of the new table's (the same
-- definitions, so PostgreSQL attaches them instead of building new ones; only the primary key is
-- rebuilt, on (id, scheduled_for)). Attaching it reads it once, to check the bound. A database
-- with no history gets no such partition. pgpulse_runs_default takes the rows of any day whose
-- partition is not there (yet): no insert ever fails for want of a partition. The leader's prune
-- creates the coming days' partitions ahead of the rows (pgpulse.db.history), moving any row the
-- default partition holds for such a day into it, and drops a day once every run in it finished
-- longer ago than the retention; what is left of older days (a backfill's run finishing today
-- for an occurrence of last month, the rows from before this migration) is deleted row by row
-- in bounded batches, as before.
--
-- The identity moves to the new table under the same sequence name (statements draw ids ahead
-- from pgpulse_runs_id_seq), continuing from where the old one was. The view over the history is
-- re-created as it was (a view names the table it was made on, not its name).
--
-- pgpulse_jobs.keep_runs: a job's own retention beside the global one, 'Nd' (runs finished more
-- than N days ago are forgotten) or 'N' (its newest N runs are kept). NULL: the global one only.
DO $migrate$
DECLARE
    live text := pg_get_viewdef('pgpulse_runs_live'::regclass);
    seq record;
    populated boolean;
    bound timestamptz;
BEGIN
    DROP VIEW pgpulse_runs_live;
    ALTER TABLE pgpulse_runs RENAME TO pgpulse_runs_before;
    ALTER SEQUENCE pgpulse_runs_id_seq RENAME TO pgpulse_runs_before_id_seq;
    SELECT last_value, is_called INTO seq FROM pgpulse_runs_before_id_seq;
    ALTER TABLE pgpulse_runs_before ALTER COLUMN id DROP IDENTITY;  -- drops that sequence
    ALTER INDEX pgpulse_runs_backfill RENAME TO pgpulse_runs_before_backfill;
    ALTER INDEX pgpulse_runs_batch RENAME TO pgpulse_runs_before_batch;
    ALTER INDEX pgpulse_runs_finished RENAME TO pgpulse_runs_before_finished;
    ALTER INDEX pgpulse_runs_occurrence RENAME TO pgpulse_runs_before_occurrence;
    ALTER INDEX pgpulse_runs_recent RENAME TO pgpulse_runs_before_recent;
    ALTER INDEX pgpulse_runs_unhappy RENAME TO pgpulse_runs_before_unhappy;
    ALTER TABLE pgpulse_runs_before DROP CONSTRAINT pgpulse_runs_pkey;

    CREATE TABLE pgpulse_runs (LIKE pgpulse_runs_before INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
        PARTITION BY RANGE (scheduled_for);
    ALTER TABLE pgpulse_runs
        ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME pgpulse_runs_id_seq);
    PERFORM setval('pgpulse_runs_id_seq', seq.last_value, seq.is_called);

    SELECT EXISTS (SELECT 1 FROM pgpulse_runs_before) INTO populated;
    IF populated THEN
        SELECT date_trunc('day', greatest(now(), max(scheduled_for)), 'UTC') + interval '1 day'
        INTO bound
        FROM pgpulse_runs_before;
        ALTER TABLE pgpulse_runs_before
            ADD CONSTRAINT pgpulse_runs_before_pkey PRIMARY KEY (id, scheduled_for);
        EXECUTE format('ALTER TABLE pgpulse_runs ATTACH PARTITION pgpulse_runs_before '
                       'FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    ELSE
        DROP TABLE pgpulse_runs_before;
    END IF;
    CREATE TABLE pgpulse_runs_default PARTITION OF pgpulse_runs DEFAULT;

    -- As they were (0008, 0011, 0012): the partition's matching indexes are attached to these.
    ALTER TABLE pgpulse_runs ADD CONSTRAINT pgpulse_runs_pkey PRIMARY KEY (id, scheduled_for);
    CREATE UNIQUE INDEX pgpulse_runs_occurrence ON pgpulse_runs (job_id, scheduled_for)
        WHERE kind = 'scheduled';
    CREATE INDEX pgpulse_runs_recent ON pgpulse_runs (job_id, id DESC);
    CREATE INDEX pgpulse_runs_backfill ON pgpulse_runs (job_id, scheduled_for)
        WHERE kind = 'backfill';
    CREATE INDEX pgpulse_runs_batch ON pgpulse_runs (batch_id) WHERE batch_id IS NOT NULL;
    CREATE INDEX pgpulse_runs_finished ON pgpulse_runs USING brin (finished_at);
    CREATE INDEX pgpulse_runs_unhappy ON pgpulse_runs (finished_at)
        WHERE outcome IN ('failed', 'skipped');

    EXECUTE 'CREATE VIEW pgpulse_runs_live AS ' || live;
END
$migrate$;

-- 'Nd': N days, from 1 to 3650; 'N': N runs, from 1 to 1,000,000.
CREATE DOMAIN pgpulse_keep_runs AS text
    CONSTRAINT pgpulse_keep_runs_days_or_count CHECK (
        (VALUE ~ '^[1-9][0-9]{0,3}d$' AND rtrim(VALUE, 'd')::int <= 3650)
        OR (VALUE ~ '^[1-9][0-9]{0,6}$' AND VALUE::int <= 1000000));
ALTER TABLE pgpulse_jobs ADD COLUMN keep_runs pgpulse_keep_runs;
