-- Runs that follow runs (docs/chains.md). A job may name upstream jobs of its tenant in `after`:
-- each run of an upstream that ends succeeded gives it one extra occurrence (kind 'after') at the
-- upstream's scheduled_for; one that ends failed (or fenced) gives it a skipped run naming the
-- upstream. With several upstreams the occurrence waits in pgpulse_after_waits until all of them
-- succeeded for that scheduled_for, at most after_timeout after the first. The statement that
-- writes it (flow_down) is sent in the transaction of the upstream's fenced outcome, and
-- pgpulse_flows, one row per (upstream run, downstream job), makes a second send of it a no-op:
-- each upstream run flows down exactly once. has_downstreams tells the claim which upstream runs
-- need flow_down at all, so a job nobody follows pays nothing for it.
-- Constant defaults: no table rewrite.
ALTER TABLE pgpulse_jobs
    ADD COLUMN after text[] NOT NULL DEFAULT '{}',
    ADD COLUMN after_timeout interval NOT NULL DEFAULT '1 hour',
    ADD COLUMN has_downstreams boolean NOT NULL DEFAULT false,
    ADD COLUMN last_success_at timestamptz,
    ADD COLUMN last_success_scheduled_for timestamptz;

-- the jobs that follow one: found by the upstream's name, among the few jobs that follow any
CREATE INDEX pgpulse_jobs_after ON pgpulse_jobs USING gin (after) WHERE after <> '{}';

ALTER TABLE pgpulse_occurrences
    DROP CONSTRAINT pgpulse_occurrences_kind_check,
    ADD CONSTRAINT pgpulse_occurrences_kind_check
        CHECK (kind IN ('trigger', 'backfill', 'scheduled', 'after')),
    -- a downstream occurrence's upstream runs, and the start of its data interval (its
    -- upstream's previous occurrence by the upstream's schedule)
    ADD COLUMN upstream_runs bigint[],
    ADD COLUMN data_interval_start timestamptz;

ALTER TABLE pgpulse_runs
    DROP CONSTRAINT pgpulse_runs_kind_check,
    ADD CONSTRAINT pgpulse_runs_kind_check
        CHECK (kind IN ('scheduled', 'trigger', 'backfill', 'after'));

ALTER TABLE pgpulse_batches
    DROP CONSTRAINT pgpulse_batches_kind_check,
    ADD CONSTRAINT pgpulse_batches_kind_check
        CHECK (kind IN ('trigger', 'backfill', 'overlap', 'after'));
-- one batch per downstream job holds its 'after' occurrences, as one overlap batch per job
CREATE UNIQUE INDEX pgpulse_batches_after ON pgpulse_batches (job_id) WHERE kind = 'after';
-- the last success of a batch's occurrences, written by finish_occurrences with the batch's
-- count of leases (the row it locks already; never the job row, which a fork locks first):
-- a downstream job's last success is its 'after' batch's, or its job row's if later
ALTER TABLE pgpulse_batches
    ADD COLUMN last_success_at timestamptz,
    ADD COLUMN last_success_scheduled_for timestamptz;

-- The join of a downstream occurrence (job_id, scheduled_for): which upstreams succeeded (by
-- name) with their runs, and its state: 'waiting' until all `needs` of them did ('ready'), one
-- failed ('failed') or the deadline passed ('expired', the sweep). A later upstream run at the
-- same instant (a backfill) starts a finished join over.
CREATE TABLE pgpulse_after_waits (
    job_id bigint NOT NULL REFERENCES pgpulse_jobs (id) ON DELETE CASCADE,
    scheduled_for timestamptz NOT NULL,
    needs int NOT NULL CHECK (needs >= 1),
    succeeded text[] NOT NULL DEFAULT '{}',
    runs bigint[] NOT NULL DEFAULT '{}',
    failed text,
    interval_start timestamptz,
    deadline timestamptz NOT NULL,
    state text NOT NULL CHECK (state IN ('waiting', 'ready', 'failed', 'expired')),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, scheduled_for)
);
CREATE INDEX pgpulse_after_waits_deadline ON pgpulse_after_waits (deadline)
    WHERE state = 'waiting';

-- Each upstream run's flow to each downstream job, once: what makes flow_down idempotent, and
-- what the chaos checker counts.
CREATE TABLE pgpulse_flows (
    upstream_run_id bigint NOT NULL,
    job_id bigint NOT NULL REFERENCES pgpulse_jobs (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (upstream_run_id, job_id)
);
CREATE INDEX pgpulse_flows_created ON pgpulse_flows USING brin (created_at);

-- The state of a join given the upstreams that succeeded, the first that failed and how many
-- it needs: failed, ready (as many distinct names as it needs) or waiting.
CREATE FUNCTION pgpulse_after_state(succeeded text[], failed text, needs int)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN failed IS NOT NULL THEN 'failed'
            WHEN (SELECT count(DISTINCT s) FROM unnest(succeeded) AS s) >= needs THEN 'ready'
            ELSE 'waiting' END;
