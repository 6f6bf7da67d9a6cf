-- Extra occurrences: occurrences that run apart from the job row's single lease (a trigger
-- with a payload, a backfill on request, the replace and allow overlap policies). Each has a
-- lease and a fencing token of its own; the design is in docs/states.md ("Extra occurrences").
--
-- Issue 19b; on top of 0004_run_attempts (its live view is extended here). Numbered 8: main
-- holds 0005_alerts, 0006_run_control and 0007_jobs_fillfactor, merged after this branch last
-- merged main (a database main migrated has versions 5-7 recorded: a 6 of this branch would
-- never be applied there). It does not depend on them; at the merge its live view must be
-- checked against theirs (the last CREATE OR REPLACE VIEW wins).

-- A job's overlap policy: forbid (the job row alone, as before), replace, or allow with a bound.
-- A constant default: no rewrite; the CHECKs are added NOT VALID and validated apart.
ALTER TABLE pgpulse_jobs
    ADD COLUMN overlap text NOT NULL DEFAULT 'forbid',
    ADD COLUMN max_concurrency integer;
ALTER TABLE pgpulse_jobs
    ADD CONSTRAINT pgpulse_jobs_overlap_check
        CHECK (overlap IN ('forbid', 'replace', 'allow')) NOT VALID,
    ADD CONSTRAINT pgpulse_jobs_max_concurrency_check
        CHECK ((max_concurrency IS NOT NULL) = (overlap = 'allow') AND max_concurrency >= 1)
        NOT VALID;
ALTER TABLE pgpulse_jobs VALIDATE CONSTRAINT pgpulse_jobs_overlap_check;
ALTER TABLE pgpulse_jobs VALIDATE CONSTRAINT pgpulse_jobs_max_concurrency_check;

-- A set of extra occurrences that share a concurrency bound, and how many of them hold a lease
-- now: one per trigger (no bound), per backfill request, per job under replace/allow (kind
-- 'overlap', at most one per job). `running` is kept by every statement that takes or releases
-- an occurrence's lease, in that statement: a claim reads it from the row it locks, which is the
-- newest version even when the statement's snapshot is older (READ COMMITTED), so a bound holds
-- across nodes claiming at once.
CREATE TABLE pgpulse_batches (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id          bigint NOT NULL REFERENCES pgpulse_jobs (id) ON DELETE CASCADE,
    kind            text NOT NULL CHECK (kind IN ('trigger', 'backfill', 'overlap')),
    max_concurrency integer CHECK (max_concurrency >= 1),
    running         integer NOT NULL DEFAULT 0 CHECK (running >= 0),
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX pgpulse_batches_overlap ON pgpulse_batches (job_id) WHERE kind = 'overlap';
CREATE INDEX pgpulse_batches_job ON pgpulse_batches (job_id);

-- One row per extra occurrence while it is pending or running (deleted when its run ends: its
-- history row stays in pgpulse_runs, with this row's id). A foreign key, unlike pgpulse_runs:
-- it is checked only when an occurrence is inserted, never when a job row changes.
CREATE TABLE pgpulse_occurrences (
    -- the id of its pgpulse_runs row, drawn from that table's sequence when it is made
    id               bigint PRIMARY KEY,
    job_id           bigint NOT NULL REFERENCES pgpulse_jobs (id) ON DELETE CASCADE,
    shard_id         smallint GENERATED ALWAYS AS ((job_id % 64)::smallint) STORED,
    kind             text NOT NULL CHECK (kind IN ('trigger', 'backfill', 'scheduled')),
    scheduled_for    timestamptz NOT NULL,
    payload          jsonb CHECK (jsonb_typeof(payload) = 'object'),  -- NULL: the job's
    batch_id         bigint NOT NULL REFERENCES pgpulse_batches (id) ON DELETE CASCADE,
    position         integer NOT NULL DEFAULT 0,  -- order within its batch
    next_run_at      timestamptz NOT NULL,
    attempt          integer NOT NULL DEFAULT 0,
    fencing_token    bigint NOT NULL DEFAULT 0,
    locked_by        text,
    lease_expires_at timestamptz,                  -- set exactly while it runs
    claimed_at       timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now()
);
-- The claim's path: pending occurrences by due instant (few rows; most of the time none).
CREATE INDEX pgpulse_occurrences_due ON pgpulse_occurrences (next_run_at, shard_id)
    WHERE lease_expires_at IS NULL;
-- The sweeper's path, as pgpulse_jobs_leases.
CREATE INDEX pgpulse_occurrences_leases ON pgpulse_occurrences (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;
CREATE INDEX pgpulse_occurrences_job ON pgpulse_occurrences (job_id);
CREATE INDEX pgpulse_occurrences_batch ON pgpulse_occurrences (batch_id);

-- The history says which runs were extra ('trigger', 'backfill'; a forked occurrence of the
-- schedule stays 'scheduled') and which batch made them. One row per (job, scheduled_for)
-- among the schedule's own runs, as before; extra runs have a row each beside it (a backfill of
-- a failed occurrence is a second row for that instant). The unique index is built over the
-- history once, under the migration's lock.
ALTER TABLE pgpulse_runs
    ADD COLUMN kind text NOT NULL DEFAULT 'scheduled',
    ADD COLUMN batch_id bigint;
ALTER TABLE pgpulse_runs
    ADD CONSTRAINT pgpulse_runs_kind_check
        CHECK (kind IN ('scheduled', 'trigger', 'backfill')) NOT VALID;
ALTER TABLE pgpulse_runs VALIDATE CONSTRAINT pgpulse_runs_kind_check;
CREATE UNIQUE INDEX pgpulse_runs_occurrence ON pgpulse_runs (job_id, scheduled_for)
    WHERE kind = 'scheduled';
ALTER TABLE pgpulse_runs DROP CONSTRAINT pgpulse_runs_job_id_scheduled_for_key;
CREATE INDEX pgpulse_runs_batch ON pgpulse_runs (batch_id) WHERE batch_id IS NOT NULL;

-- 'cancelled': an occurrence replaced by a newer one under overlap 'replace'.
ALTER TABLE pgpulse_runs DROP CONSTRAINT pgpulse_runs_outcome_check;
ALTER TABLE pgpulse_runs
    ADD CONSTRAINT pgpulse_runs_outcome_check
        CHECK (outcome IN ('running', 'retrying', 'succeeded', 'failed', 'skipped', 'fenced',
                           'cancelled')) NOT VALID;
ALTER TABLE pgpulse_runs VALIDATE CONSTRAINT pgpulse_runs_outcome_check;

-- The live view (0004's) adds the extra occurrences running now, and says each row's kind (a
-- new last column). A run row of an occurrence running now (an earlier attempt's 'retrying') is
-- shown as the running attempt, with that row's attempts as its earlier ones, as a job row's.
CREATE OR REPLACE VIEW pgpulse_runs_live AS
SELECT r.id, r.job_id, r.scheduled_for, r.attempts, r.outcome, r.node_id, r.fencing_token,
       r.started_at, r.finished_at, r.error, r.output, r.occurrences, r.last_scheduled_for,
       r.earlier_attempts, r.attempt_ended_at,
       coalesce((r.earlier_attempts -> 0 ->> 'started_at')::timestamptz, r.started_at)
           AS first_started_at,
       r.kind
FROM pgpulse_runs r
WHERE NOT EXISTS (SELECT 1 FROM pgpulse_jobs j
                  WHERE j.id = r.job_id AND j.status = 'running'
                    AND j.scheduled_for = r.scheduled_for AND r.kind = 'scheduled')
  AND NOT EXISTS (SELECT 1 FROM pgpulse_occurrences o
                  WHERE o.id = r.id AND o.lease_expires_at IS NOT NULL)
UNION ALL
SELECT j.run_id, j.id, j.scheduled_for, j.attempt, 'running', j.locked_by, j.fencing_token,
       j.claimed_at, NULL::timestamptz, NULL::text, NULL::text, 1::bigint, NULL::timestamptz,
       prior.attempts, NULL::timestamptz,
       coalesce((prior.attempts -> 0 ->> 'started_at')::timestamptz, j.claimed_at),
       'scheduled'::text
FROM pgpulse_jobs j
LEFT JOIN LATERAL (
    SELECT coalesce(p.earlier_attempts, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
               'attempt', p.attempts, 'node_id', p.node_id, 'fencing_token', p.fencing_token,
               'started_at', p.started_at, 'ended_at', p.attempt_ended_at,
               'outcome', p.outcome, 'error', p.error, 'output', p.output)) AS attempts
    FROM pgpulse_runs p
    WHERE p.job_id = j.id
      AND p.scheduled_for = j.scheduled_for
      AND p.kind = 'scheduled'
      AND p.started_at IS NOT NULL
) prior ON true
WHERE j.status = 'running'
UNION ALL
SELECT o.id, o.job_id, o.scheduled_for, o.attempt, 'running', o.locked_by, o.fencing_token,
       o.claimed_at, NULL::timestamptz, NULL::text, NULL::text, 1::bigint, NULL::timestamptz,
       prior.attempts, NULL::timestamptz,
       coalesce((prior.attempts -> 0 ->> 'started_at')::timestamptz, o.claimed_at),
       o.kind
FROM pgpulse_occurrences o
LEFT JOIN LATERAL (
    SELECT coalesce(p.earlier_attempts, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
               'attempt', p.attempts, 'node_id', p.node_id, 'fencing_token', p.fencing_token,
               'started_at', p.started_at, 'ended_at', p.attempt_ended_at,
               'outcome', p.outcome, 'error', p.error, 'output', p.output)) AS attempts
    FROM pgpulse_runs p
    WHERE p.id = o.id
      AND p.started_at IS NOT NULL
    LIMIT 1  -- a lookup by primary key: never pulled up into a join over pgpulse_runs
) prior ON true
WHERE o.lease_expires_at IS NOT NULL;

-- The audit trail records a backfill request as an action of its own (a trigger with a payload
-- is a 'trigger', with the payload and the run id as its changes).
ALTER TABLE pgpulse_job_history DROP CONSTRAINT pgpulse_job_history_action_check;
ALTER TABLE pgpulse_job_history
    ADD CONSTRAINT pgpulse_job_history_action_check
        CHECK (action IN ('create', 'update', 'pause', 'resume', 'trigger', 'backfill',
                          'delete')) NOT VALID;
ALTER TABLE pgpulse_job_history VALIDATE CONSTRAINT pgpulse_job_history_action_check;
