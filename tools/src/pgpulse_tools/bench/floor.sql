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

-- name: make_due
-- Scenario 1: make the first %(due)s jobs (by id) due, spread over the past 30 minutes as `load`
-- spreads them, and every other idle job due tomorrow; a row already on its side is left alone,
-- so raising the backlog from one level to the next writes only the newly due rows.
UPDATE floor_jobs
SET next_run_at = CASE WHEN id <= %(due)s THEN now() - make_interval(secs => mod(id, 1800))
                       ELSE now() + make_interval(secs => 86400 + mod(id, 86400)) END,
    scheduled_for = CASE WHEN id <= %(due)s THEN now() - make_interval(secs => mod(id, 1800))
                         ELSE now() + make_interval(secs => 86400 + mod(id, 86400)) END
WHERE status = 'idle'
  AND (id <= %(due)s) <> (next_run_at <= now());

-- name: index
-- The due index, built after the load (then VACUUM ANALYZE, as for Pulse's benchmark data).
CREATE INDEX floor_jobs_due ON floor_jobs (next_run_at) WHERE status = 'idle';

-- name: widen
-- A variant (the narrow-row prototype, scenario 3): the floor's job row made as wide as Pulse's by
-- a definition column of %(pad)s bytes that no firing writes, so the floor and this variant
-- differ in row width only. Run after `load`, before `index`; VACUUM FULL compacts the rewrite.
ALTER TABLE floor_jobs ADD COLUMN definition text;
UPDATE floor_jobs SET definition = repeat('d', %(pad)s);
VACUUM FULL floor_jobs;

-- name: pulse_indexes
-- A variant: the floor with the B-trees Pulse's schema adds on the hot path beside the floor's
-- (a sweeper's lease index; the history's unique occurrence key, per-job listing and pruning
-- index), so the floor and this variant differ in index entries per firing only.
CREATE INDEX floor_jobs_leases ON floor_jobs (lease_expires_at) WHERE status = 'running';
CREATE UNIQUE INDEX floor_runs_occurrence ON floor_runs (job_id, scheduled_for);
CREATE INDEX floor_runs_recent ON floor_runs (job_id, id DESC);
CREATE INDEX floor_runs_finished ON floor_runs (finished_at);

-- name: fillfactor
-- A variant: floor_jobs pages kept 30 % free, as pgpulse_jobs' are (migration 0007), so an
-- updated row version can stay on its page.
ALTER TABLE floor_jobs SET (fillfactor = 70);
VACUUM FULL floor_jobs;

-- name: hot_claim
-- A variant (with `fillfactor`): the due index without a status predicate, so the claim, which
-- changes no indexed column (status, token, lease), is a HOT update and adds no index entry; the
-- completion moves next_run_at and adds one entry in each index. The claim's scan now reads the
-- running rows' entries too (at the head of the index: they were due first) and drops them on
-- the heap's status.
DROP INDEX floor_jobs_due;
CREATE INDEX floor_jobs_due ON floor_jobs (next_run_at);

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
