-- Pulse schema, version 4: a run's history row is written when an attempt ends, not at claim.
-- Up to version 3 a claim inserted (or re-opened) the occurrence's job_runs row as 'running' and
-- the attempt's end updated it: two row versions of job_runs per firing. From now on the job
-- row alone says what is running (status, locked_by, fencing_token, attempt), with two new
-- columns: run_id, the id the occurrence's job_runs row has or will have (drawn from job_runs'
-- own sequence at the first claim of the occurrence and kept until the job moves to another
-- occurrence, so a handler knows its run id before the row exists and every attempt shares it),
-- and claimed_at, the database's instant of the last claim. The
-- end of an attempt (or the sweeper, for a lease that expired) writes the row in one upsert.
-- job_runs_live shows job_runs with the attempts running now, as job_runs did before.
ALTER TABLE scheduled_jobs ADD COLUMN run_id bigint, ADD COLUMN claimed_at timestamptz;

-- A job whose current occurrence has a row already (running, or waiting for a retry) keeps it.
UPDATE scheduled_jobs j
SET run_id = r.id, claimed_at = CASE WHEN j.status = 'running' THEN r.started_at END
FROM job_runs r
WHERE r.job_id = j.id AND r.scheduled_for = j.scheduled_for;

-- job_runs, and the occurrences running now (one row each, outcome 'running'): a retry's row
-- written by an earlier attempt is shown as the running attempt while it runs.
CREATE VIEW job_runs_live AS
SELECT r.id, r.job_id, r.scheduled_for, r.attempts, r.outcome, r.node_id, r.fencing_token,
       r.started_at, r.finished_at, r.error, r.output
FROM job_runs r
WHERE NOT EXISTS (SELECT 1 FROM scheduled_jobs j
                  WHERE j.id = r.job_id AND j.status = 'running'
                    AND j.scheduled_for = r.scheduled_for)
UNION ALL
SELECT j.run_id, j.id, j.scheduled_for, j.attempt, 'running', j.locked_by, j.fencing_token,
       j.claimed_at, NULL::timestamptz, NULL::text, NULL::text
FROM scheduled_jobs j
WHERE j.status = 'running';
