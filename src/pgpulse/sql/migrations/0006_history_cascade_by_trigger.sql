-- Pulse schema, version 6: a job's history is deleted with the job by a trigger, not by a
-- foreign key.
-- Every firing writes one job_runs row, and the foreign key job_runs.job_id -> scheduled_jobs
-- checked each one: PostgreSQL queues a referential-integrity event per inserted row and runs
-- its lookup (SELECT ... FOR KEY SHARE on scheduled_jobs) once per row at the end of the
-- statement: about 5 us per history row on a 2-core machine (50 job rows updated and 50
-- history rows inserted per transaction, pgbench, 1 client: 1.44 ms with the key, 1.21 ms
-- without), some 6 % of the database's time per firing. It guarded nothing Pulse needs: every
-- statement that writes history (the step, the sweeper) inserts rows only for job rows it has
-- just updated in the same statement, so those rows are locked and cannot be deleted under it.
-- What the key also did, ON DELETE CASCADE, the triggers below keep: deleting jobs deletes
-- their history, by any statement (Pulse's delete_job, a DELETE by hand), once per statement.
-- A delete that waited for a running step's lock sees the history that step wrote: the
-- trigger's DELETE takes a new snapshot (READ COMMITTED). TRUNCATE scheduled_jobs (which needs
-- CASCADE, for job_names) truncates job_runs too.
ALTER TABLE job_runs DROP CONSTRAINT job_runs_job_id_fkey;

CREATE FUNCTION pgpulse_job_runs_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_runs r USING removed d WHERE r.job_id = d.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_runs_delete AFTER DELETE ON scheduled_jobs
REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION pgpulse_job_runs_delete();

CREATE FUNCTION pgpulse_job_runs_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE job_runs;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_runs_truncate AFTER TRUNCATE ON scheduled_jobs
FOR EACH STATEMENT EXECUTE FUNCTION pgpulse_job_runs_truncate();
