-- The floor: the least SQL any PostgreSQL-backed scheduler must run per firing, on the least
-- schema that can hold it. Not Pulse's: no definitions to return, no shards, no run id, no
-- retries sharing a history row, no skipped occurrences, one B-tree on the history and one
-- partial index for the due scan (and none for the sweeper). What the benchmark measures here
-- is how fast this machine can claim, complete and record at all, so a target can be compared
-- with what no design could beat on it.

-- name: schema
-- The two tables, emptied. floor_jobs rows are narrow; an expired lease has no index to find it.
DROP TABLE IF EXISTS floor_jobs, floor_runs;
CREATE TABLE floor_jobs (
    id               bigint PRIMARY KEY,
    status           text NOT NULL DEFAULT 'idle',
    scheduled_for    timestamptz NOT NULL,
    next_run_at      timestamptz NOT NULL,
    fencing_token    bigint NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    claimed_at       timestamptz
);
CREATE TABLE floor_runs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        bigint NOT NULL,
    scheduled_for timestamptz NOT NULL,
    fencing_token bigint NOT NULL,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz NOT NULL
);

-- name: load
-- %(jobs)s jobs; the first %(due)s are due (spread over the past 30 minutes), the others due
-- tomorrow.
INSERT INTO floor_jobs (id, scheduled_for, next_run_at)
SELECT i, t.at, t.at
FROM generate_series(1, %(jobs)s::bigint) AS i,
     LATERAL (SELECT CASE WHEN i <= %(due)s THEN now() - make_interval(secs => mod(i, 1800))
                          ELSE now() + make_interval(secs => 86400 + mod(i, 86400)) END AS at) t;

-- name: index
-- The due index, built after the load (then VACUUM ANALYZE, as for Pulse's benchmark data).
CREATE INDEX floor_jobs_due ON floor_jobs (next_run_at) WHERE status = 'idle';

-- name: claim
-- Claim up to %(limit)s due jobs: lock them without waiting, move them to running under a new
-- fencing token and a 60 s lease, noting the claim's instant.
WITH due AS (
    SELECT id FROM floor_jobs
    WHERE status = 'idle' AND next_run_at <= now()
    ORDER BY next_run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE floor_jobs j
SET status = 'running', fencing_token = j.fencing_token + 1,
    lease_expires_at = now() + interval '60 seconds', claimed_at = now()
WHERE j.id = ANY(ARRAY(SELECT id FROM due))
RETURNING j.id, j.fencing_token;

-- name: unclaim
-- Scenario 1: hand the claimed jobs back unchanged (untimed), so the backlog keeps its size.
UPDATE floor_jobs SET status = 'idle', lease_expires_at = NULL
WHERE id = ANY(%(ids)s::bigint[]) AND status = 'running';

-- name: step
-- Scenario 3, driven by pgbench (:ids, :tokens and :batch are its variables): complete the jobs
-- the previous step claimed, fenced, each moved to its next hourly occurrence and recorded in
-- floor_runs; then claim the next batch, whose ids and tokens the script keeps for the next step.
WITH finished AS (
    UPDATE floor_jobs j
    SET status = 'idle', lease_expires_at = NULL,
        scheduled_for = j.scheduled_for + interval '1 hour',
        next_run_at = j.scheduled_for + interval '1 hour'
    FROM unnest((:ids)::bigint[], (:tokens)::bigint[]) AS done(id, token)
    WHERE j.id = done.id AND j.fencing_token = done.token AND j.lease_expires_at IS NOT NULL
    RETURNING j.id, j.fencing_token, j.scheduled_for - interval '1 hour' AS occurrence,
              j.claimed_at
), recorded AS (
    INSERT INTO floor_runs (job_id, scheduled_for, fencing_token, started_at, finished_at)
    SELECT id, occurrence, fencing_token, claimed_at, now() FROM finished
), due AS (
    SELECT id FROM floor_jobs
    WHERE status = 'idle' AND next_run_at <= now()
    ORDER BY next_run_at
    LIMIT (:batch)
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE floor_jobs j
    SET status = 'running', fencing_token = j.fencing_token + 1,
        lease_expires_at = now() + interval '60 seconds', claimed_at = now()
    WHERE j.id = ANY(ARRAY(SELECT id FROM due))
    RETURNING j.id, j.fencing_token
)
SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(fencing_token), '{}') AS tokens
FROM claimed;

-- name: fired_span
-- Scenario 3: all firings so far: how many, first claim instant and last completion instant
-- (as bench.sql's fired_span reads Pulse's).
SELECT count(*) AS fired, min(started_at) AS first_started, max(finished_at) AS last_finished
FROM floor_runs;
