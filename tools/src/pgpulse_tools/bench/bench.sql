-- Statements of `pgpulse bench` only (loading and resetting benchmark data, reading results).
-- Pulse's own statements come from sql/queries.sql and are never copied here: the benchmark
-- drives them through the Store, and the raw ceiling (pgbench) is generated from their text.

-- name: load_jobs
-- Bulk-load jobs %(first)s..%(last)s exactly as upsert_jobs would store them (one statement, so
-- 1,000,000 jobs load in seconds). Job i holds the occurrence
-- %(base)s + (i mod %(modulo)s) * %(step)s seconds; interval schedules are anchored there.
INSERT INTO pgpulse_jobs (tenant, name, schedule, schedule_kind, timezone, handler, payload,
                            catch_up, misfire_grace, max_attempts, timeout, source, anchor_at,
                            scheduled_for, next_run_at)
SELECT 'bench', 'job-' || i, %(schedule)s, %(kind)s, 'UTC', %(handler)s, '{}'::jsonb,
       %(catch_up)s, make_interval(secs => %(misfire_grace)s), 3,
       make_interval(secs => 60), 'bench', t.at, t.at, t.at
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i,
     LATERAL (SELECT %(base)s::timestamptz
                     + make_interval(secs => mod(i, %(modulo)s::bigint) * %(step)s::float8)
                     AS at) AS t;

-- name: split_handlers
-- Scenario 1's mixed cell: every other due job (even ids) gets a handler the claiming node lacks
-- and is made an hour older, so those jobs stand first in due order: a claim that stepped over
-- the jobs it cannot run would read all of them before the first it can.
UPDATE pgpulse_jobs
SET handler = %(handler)s,
    next_run_at = next_run_at - interval '1 hour',
    scheduled_for = scheduled_for - interval '1 hour'
WHERE status = 'idle'
  AND next_run_at <= now()
  AND mod(id, 2) = 0;

-- name: make_due
-- Scenario 1: make the first %(due)s jobs (by id) due, spread over the past hour, and every other
-- idle job due only tomorrow or later.
UPDATE pgpulse_jobs
SET next_run_at = CASE WHEN id <= %(first_id)s + %(due)s - 1
                       THEN now() - make_interval(secs => 60 + mod(id, 3000))
                       ELSE now() + make_interval(secs => 86400 + mod(id, 86400)) END,
    scheduled_for = CASE WHEN id <= %(first_id)s + %(due)s - 1
                         THEN now() - make_interval(secs => 60 + mod(id, 3000))
                         ELSE now() + make_interval(secs => 86400 + mod(id, 86400)) END
WHERE status = 'idle'
  AND (id <= %(first_id)s + %(due)s - 1) <> (next_run_at <= now());

-- name: unclaim
-- Scenario 1: hand claimed jobs back unchanged (same occurrence, same due time) so the backlog
-- keeps its size between two timed claims. Not timed.
UPDATE pgpulse_jobs
SET status = 'idle', locked_by = NULL, lease_expires_at = NULL, attempt = 0, run_id = NULL
WHERE id = ANY(%(ids)s::bigint[]) AND status = 'running';

-- name: first_id
SELECT min(id) AS first_id, count(*) AS jobs FROM pgpulse_jobs;

-- name: db_processes
-- Server processes working for database %(dbname)s, plus the shared WAL writer, checkpointer and
-- background writer (backend_type in %(aux)s): what DbCpu meters.
SELECT pid FROM pg_stat_activity
WHERE datname = %(dbname)s OR backend_type = ANY(%(aux)s::text[]);

-- name: xacts
-- Transactions committed or rolled back in this database (each autocommit statement is one).
SELECT xact_commit + xact_rollback AS xacts
FROM pg_stat_database WHERE datname = current_database();

-- name: drain_progress
SELECT count(*) AS done FROM pgpulse_runs WHERE outcome = 'succeeded';

-- name: drain_result
-- Firings (succeeded runs) whose history write finished between the first claim and
-- %(window)s seconds later, by the database's clock.
WITH first AS (SELECT min(started_at) AS t0 FROM pgpulse_runs)
SELECT extract(epoch FROM first.t0)::float8 AS t0,
       count(*) FILTER (WHERE r.finished_at <= first.t0 + make_interval(secs => %(window)s))
           AS fired,
       count(*) AS fired_total,
       extract(epoch FROM max(r.finished_at) - first.t0)::float8 AS span
FROM pgpulse_runs r, first
WHERE r.outcome = 'succeeded'
GROUP BY first.t0;

-- name: duplicates
-- Occurrences run more than once (must be none): attempts > 1 without a failure are re-claims.
SELECT count(*) AS duplicates FROM pgpulse_runs WHERE attempts > 1 AND outcome = 'succeeded';

-- name: lag_samples
-- Lag of every run that started: claim instant (the handler starts at once) minus scheduled_for,
-- in milliseconds, for occurrences scheduled within [%(t0)s, %(t1)s].
SELECT extract(epoch FROM r.started_at - r.scheduled_for)::float8 * 1000 AS lag_ms,
       extract(epoch FROM r.started_at)::float8 AS started
FROM pgpulse_runs r
WHERE r.scheduled_for BETWEEN %(t0)s AND %(t1)s AND r.started_at IS NOT NULL
ORDER BY r.started_at;

-- name: occurrence_counts
-- For occurrences scheduled within [%(t0)s, %(t1)s]: runs by outcome.
SELECT outcome, count(*) AS n FROM pgpulse_runs
WHERE scheduled_for BETWEEN %(t0)s AND %(t1)s
GROUP BY outcome ORDER BY outcome;

-- name: settings
-- The settings that shape the figures, as the server shows them (with units: '128MB').
SELECT name, current_setting(name) AS setting, '' AS unit FROM pg_settings
WHERE name IN ('server_version', 'shared_buffers', 'work_mem', 'synchronous_commit', 'fsync',
               'max_connections', 'jit', 'plan_cache_mode', 'random_page_cost',
               'effective_cache_size', 'autovacuum')
ORDER BY name;

-- name: register_handler
-- A stopped pseudo-node that knows handler %(handler)s, as a node running it would register.
INSERT INTO pgpulse_nodes (node_id, hostname, pid, state, handlers)
VALUES ('bench-loader', 'bench', 0, 'stopped', ARRAY[%(handler)s])
ON CONFLICT (node_id) DO NOTHING;

-- name: now
SELECT now() AS now;

-- name: nodes_alive
-- Benchmark nodes alive by the database's clock, with the shards each reported at its last
-- heartbeat (the cluster has settled when these partition the 64 shards).
SELECT node_id, shards FROM pgpulse_nodes
WHERE state = 'alive' AND last_heartbeat > now() - interval '10 seconds'
ORDER BY node_id;

-- name: backlog_state
-- Whether any job is still due (cheap: the head of pgpulse_jobs_due) or running.
SELECT EXISTS (SELECT 1 FROM pgpulse_jobs WHERE status = 'idle' AND next_run_at <= now())
           AS due,
       EXISTS (SELECT 1 FROM pgpulse_jobs WHERE status = 'running') AS running,
       now() AS now;

-- name: fired_between
-- Firings (succeeded runs) whose history write committed within [%(t0)s, %(t1)s] (the
-- database's clock), and the last such instant.
SELECT count(*) AS fired, max(finished_at) AS last_finished
FROM pgpulse_runs
WHERE outcome = 'succeeded' AND finished_at BETWEEN %(t0)s AND %(t1)s;

-- name: fired_span
-- All firings so far: how many, first claim instant and last completion instant.
SELECT count(*) AS fired, min(started_at) AS first_started, max(finished_at) AS last_finished
FROM pgpulse_runs WHERE outcome = 'succeeded';

-- name: database_exists
SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = %(name)s) AS found;

-- name: wake
-- The wake-up notification every node listens for (empty payload: all shards).
SELECT pg_notify('pgpulse_wakeup', '');

-- name: park_all
-- Make every job wait a day (nothing due), keeping its schedule.
UPDATE pgpulse_jobs SET scheduled_for = now() + interval '1 day',
                          next_run_at = now() + interval '1 day';

-- name: herd_instant
-- The instant the herd falls due: the next whole second at least %(lead)s seconds away.
SELECT date_trunc('second', now()) + make_interval(secs => %(lead)s + 1) AS at;

-- name: herd_arm
-- Scenario 5: every job falls due at %(at)s on a once-an-hour cron schedule %(schedule)s, each
-- claimable at its spread instant (%(spread)s seconds of spread; 0: all at %(at)s).
UPDATE pgpulse_jobs
SET schedule = %(schedule)s, schedule_kind = 'cron', scheduled_for = %(at)s,
    spread = %(spread)s, next_run_at = %(at)s + pgpulse_spread_offset(id, %(spread)s),
    anchor_at = %(at)s;

-- name: herd_spread_lags
-- Claim lag from each run's spread instant (claim minus scheduled_for plus the job's offset,
-- ms) of occurrence %(at)s, and the busiest second of claims.
SELECT extract(epoch FROM r.started_at - r.scheduled_for
                          - pgpulse_spread_offset(j.id, j.spread))::float8 * 1000 AS lag_ms
FROM pgpulse_runs_live r JOIN pgpulse_jobs j ON j.id = r.job_id
WHERE r.scheduled_for = %(at)s AND r.started_at IS NOT NULL;

-- name: herd_peak_claims
-- The most claims of occurrence %(at)s made in one wall-clock second (exact, from the history).
SELECT coalesce(max(n), 0) AS peak
FROM (SELECT count(*) AS n FROM pgpulse_runs_live
      WHERE scheduled_for = %(at)s AND started_at IS NOT NULL
      GROUP BY date_trunc('second', started_at)) per_second;

-- name: herd_load_sample
-- One sample of the database's load: transactions so far and the sessions running a statement.
SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database
        WHERE datname = current_database()) AS xacts,
       (SELECT count(*) FROM pg_stat_activity
        WHERE datname = current_database() AND state = 'active'
          AND pid <> pg_backend_pid()) AS active;

-- name: started_at
-- How many runs of occurrence %(at)s have started, and the last claim instant (pgpulse_runs_live:
-- a run's row is written when it ends).
SELECT count(*) AS started, max(started_at) AS last_started
FROM pgpulse_runs_live WHERE scheduled_for = %(at)s;

-- name: claim_lags
-- Claim lag (claim instant minus scheduled_for, ms) of runs of occurrences in [%(t0)s, %(t1)s].
SELECT extract(epoch FROM started_at - scheduled_for)::float8 * 1000 AS lag_ms
FROM pgpulse_runs_live
WHERE scheduled_for BETWEEN %(t0)s AND %(t1)s AND started_at IS NOT NULL;

-- name: db_activity
-- Transactions and sessions this database has seen so far (cumulative; each autocommit
-- statement is one transaction). Backends report with up to ~1 s delay, 10 s when idle.
SELECT xact_commit + xact_rollback AS xacts, sessions
FROM pg_stat_database WHERE datname = current_database();

-- name: table_writes
-- Writes to every user table of this database so far (cumulative), with how many of its indexes
-- are full (every non-HOT row version adds an entry) and partial (at most that many). BRIN
-- indexes summarise page ranges rather than hold an entry per row version: counted in neither.
SELECT t.relname,
       t.n_tup_ins AS ins,
       t.n_tup_upd AS upd,
       t.n_tup_hot_upd AS hot,
       t.n_tup_del AS del,
       count(i.indexrelid) FILTER (WHERE i.indpred IS NULL AND am.amname <> 'brin')
           AS full_indexes,
       count(i.indexrelid) FILTER (WHERE i.indpred IS NOT NULL AND am.amname <> 'brin')
           AS partial_indexes
FROM pg_stat_user_tables t
LEFT JOIN pg_index i ON i.indrelid = t.relid
LEFT JOIN pg_class c ON c.oid = i.indexrelid
LEFT JOIN pg_am am ON am.oid = c.relam
GROUP BY t.relname, t.n_tup_ins, t.n_tup_upd, t.n_tup_hot_upd, t.n_tup_del;

-- name: wal_position
-- The server's WAL insert position and its full-page images so far (the whole server's WAL).
SELECT pg_current_wal_lsn()::text AS lsn, w.wal_fpi AS fpi
FROM pg_stat_wal w;

-- name: wal_diff
-- WAL bytes between two positions.
SELECT pg_wal_lsn_diff(%(lsn1)s::pg_lsn, %(lsn0)s::pg_lsn)::float8 AS bytes;

-- name: lever_history_btree
-- Lever, measured backwards: the history's indexes as they were before migration 0012 (a B-tree
-- over every finished run's finished_at), to show what 0012 saves in the same run.
DROP INDEX pgpulse_runs_unhappy;
DROP INDEX pgpulse_runs_finished;
CREATE INDEX pgpulse_runs_finished ON pgpulse_runs (finished_at) WHERE finished_at IS NOT NULL;

-- name: lever_no_runs_recent
-- Lever: no (job_id, id DESC) index on the history; a job's latest runs would be read through
-- the unique (job_id, scheduled_for) index instead (in occurrence order, not id order).
DROP INDEX pgpulse_runs_recent;

-- name: lever_one_table
-- Lever: leases on occurrence rows (issue 31's one table): a job-row claim's occurrence row has
-- no batch.
ALTER TABLE pgpulse_occurrences ALTER COLUMN batch_id DROP NOT NULL;

-- name: lever_keyed
-- Lever: every job shares one concurrency key, limited far above a batch (so every claim
-- checks, locks and bumps the key's limit row, and counts its leases, and none waits): what a
-- key costs per claim (docs/policies.md, "Concurrency keys and priority").
INSERT INTO pgpulse_limits (tenant, key, max_running)
SELECT DISTINCT tenant, 'bench', 100000 FROM pgpulse_jobs;
UPDATE pgpulse_jobs SET concurrency_key = 'bench';
VACUUM ANALYZE pgpulse_jobs;

-- name: lever_priority
-- Lever: every job has priority 5 (all in the priority index, so the claim's second scan
-- reads as many rows as its first): what a priority costs per claim.
UPDATE pgpulse_jobs SET priority = 5;
VACUUM ANALYZE pgpulse_jobs;

-- name: scaleout_backlog
-- Scenario 9: make jobs 1..%(backlog)s due now (a backlog for the drain), keeping their schedule.
UPDATE pgpulse_jobs SET scheduled_for = now(), next_run_at = now()
WHERE id <= %(backlog)s AND status = 'idle';

-- name: scaleout_drain
-- Scenario 9: firings of the backlog (jobs 1..%(backlog)s) so far, and the seconds from the first
-- claim to the last history write, by the database's clock.
SELECT count(*) AS fired,
       coalesce(extract(epoch FROM max(finished_at) - min(started_at))::float8, 0) AS span
FROM pgpulse_runs WHERE job_id <= %(backlog)s AND outcome = 'succeeded';

-- name: scaleout_sessions
-- Scenario 9: sessions open to this database now, other than this one.
SELECT count(*) AS sessions FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid();

-- name: scaleout_sizes
-- Scenario 9: bytes on disk of pgpulse_jobs and pgpulse_runs and of each of their indexes (main
-- fork), with the rows of their table now. The partitioned history and its indexes count their
-- partitions' (pg_partition_tree: none for a table that is not partitioned).
SELECT c.relname AS relation, t.relname AS of_table,
       coalesce((SELECT sum(pg_relation_size(p.relid))::bigint FROM pg_partition_tree(c.oid) p),
                pg_relation_size(c.oid)) AS bytes,
       CASE t.relname WHEN 'pgpulse_jobs' THEN (SELECT count(*) FROM pgpulse_jobs)
                      ELSE (SELECT count(*) FROM pgpulse_runs) END AS table_rows
FROM pg_class AS c
LEFT JOIN pg_index AS i ON i.indexrelid = c.oid
JOIN pg_class AS t ON t.oid = coalesce(i.indrelid, c.oid)
WHERE t.relname IN ('pgpulse_jobs', 'pgpulse_runs') AND c.relkind IN ('r', 'i', 'p', 'I')
ORDER BY t.relname, c.relkind DESC, c.relname;

-- name: history_insert
-- Scenario 11: a batch of history rows %(first)s..%(last)s as the recorder writes them (one row
-- per firing, succeeded) into pgpulse_runs; row i's occurrence is i × %(step)s seconds after
-- %(base)s, so the rows arrive in time order, as a real history does.
INSERT INTO pgpulse_runs (job_id, scheduled_for, attempts, outcome, node_id, fencing_token,
                          started_at, finished_at, kind)
SELECT mod(i, 10000) + 1, t.at, 1, 'succeeded', 'node-1', i, t.at, t.at + interval '5 ms',
       'scheduled'
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i,
     LATERAL (SELECT %(base)s::timestamptz + make_interval(secs => i * %(step)s::float8) AS at)
         AS t;

-- name: history_recent
-- The newest 20 runs of one job (the job page's history; the (job_id, id DESC) index).
SELECT id FROM pgpulse_runs WHERE job_id = %(job)s ORDER BY id DESC LIMIT 20;

-- name: history_delete_before
-- Prune the history of schema 0019 (one table) as its leader pruned it: one DELETE of the runs
-- finished before %(cutoff)s.
DELETE FROM pgpulse_runs r WHERE r.finished_at < %(cutoff)s;

-- name: history_vacuum
-- What the DELETE leaves to do: the dead rows' space back, their index entries gone.
VACUUM pgpulse_runs;

-- name: history_count
SELECT count(*) AS n FROM pgpulse_runs;

-- name: history_partition_count
SELECT count(*) AS n FROM pg_inherits WHERE inhparent = 'pgpulse_runs'::regclass;

-- name: celery_handler
-- Scenario 12: the backlog's jobs send through the celery handler instead of running a no-op.
UPDATE pgpulse_jobs
SET handler = 'celery',
    payload = %(payload)s;
