-- Pulse schema, version 7: skipped occurrences are summarised in one history row, and a job's
-- misfire_grace is at least one second.
--
-- A catch-up decision can skip any number of consecutive occurrences of a job (a `* * * * * *`
-- job ten years behind skips 315 million of them). It writes them as one job_runs row with
-- outcome 'skipped': scheduled_for is the first of them, occurrences how many the row stands
-- for, last_scheduled_for the last of them. Every other row stands for its own occurrence alone
-- (occurrences 1, last_scheduled_for NULL), so the statements that write runs and reaps need no
-- change. A row's occurrences are the schedule's occurrences from scheduled_for through
-- last_scheduled_for (an off-schedule, triggered occurrence can only be the first).
-- The check is NOT VALID: existing rows hold the defaults, and checking them would read the
-- whole history; new and updated rows are checked.
ALTER TABLE job_runs
    ADD COLUMN occurrences bigint NOT NULL DEFAULT 1,
    ADD COLUMN last_scheduled_for timestamptz;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_occurrences
    CHECK (occurrences >= 1 AND (occurrences = 1) = (last_scheduled_for IS NULL)
           AND last_scheduled_for >= scheduled_for)
    NOT VALID;

CREATE OR REPLACE VIEW job_runs_live AS
SELECT r.id, r.job_id, r.scheduled_for, r.attempts, r.outcome, r.node_id, r.fencing_token,
       r.started_at, r.finished_at, r.error, r.output, r.occurrences, r.last_scheduled_for
FROM job_runs r
WHERE NOT EXISTS (SELECT 1 FROM scheduled_jobs j
                  WHERE j.id = r.job_id AND j.status = 'running'
                    AND j.scheduled_for = r.scheduled_for)
UNION ALL
SELECT j.run_id, j.id, j.scheduled_for, j.attempt, 'running', j.locked_by, j.fencing_token,
       j.claimed_at, NULL::timestamptz, NULL::text, NULL::text, 1::bigint, NULL::timestamptz
FROM scheduled_jobs j
WHERE j.status = 'running';

-- misfire_grace 0 could never run an occurrence: a claim always comes some milliseconds after
-- the occurrence is due, so it was always late. From version 7 the least grace is one second
-- (refused below that when a job is written); jobs stored with less get one second.
UPDATE scheduled_jobs
SET misfire_grace = interval '1 second'
WHERE misfire_grace < interval '1 second';
