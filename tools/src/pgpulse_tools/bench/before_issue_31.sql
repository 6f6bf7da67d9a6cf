-- The claim step as one statement, as Pulse sent it before issue 31 split it into finish_jobs,
-- claim_jobs and next_job_due (revision 65a6824: finish_and_claim without its rare parts, as
-- sent as written): the benchmark's "before" lever (levers.BEFORE_31), measured beside the
-- step as it is in one run. A frozen copy, on purpose: it is what is compared against.
WITH clock AS (
SELECT coalesce(%(now)s::timestamptz, now()) AS now,
(('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint - 1) << 48
AS epoch
),
input AS (
SELECT *
FROM json_to_recordset(%(outcomes)s::json) AS i (
job_id bigint, token bigint, status text, scheduled_for timestamptz,
next_run_at timestamptz, retry_in float8, reset_attempt bool, outcome text,
error text, output text, skips bigint, skip_from timestamptz, skip_to timestamptz,
skip_reason text, counts_run bool, failures int, pause_reason text,
run_id bigint, run_scheduled_for timestamptz, attempt int, node text
)
),
job AS (
UPDATE pgpulse_jobs AS j
SET status = i.status,
scheduled_for = i.scheduled_for,
next_run_at = coalesce(i.next_run_at, clock.now + make_interval(secs => i.retry_in)),
attempt = CASE WHEN i.reset_attempt THEN 0 ELSE j.attempt END,
interruptions = CASE WHEN i.reset_attempt THEN 0 ELSE j.interruptions END,
run_id = CASE WHEN i.reset_attempt THEN NULL ELSE j.run_id END,
locked_by = NULL,
lease_expires_at = NULL,
last_outcome = i.outcome,
last_error = i.error,
last_finished_at = clock.now,
runs_done = j.runs_done + CASE WHEN i.counts_run THEN 1 ELSE 0 END,
failures = coalesce(i.failures, j.failures),
pause_reason = CASE WHEN i.status = 'paused' THEN i.pause_reason ELSE j.pause_reason END,
updated_at = clock.now
FROM input AS i, clock
WHERE j.id = ANY(ARRAY(SELECT job_id FROM input))
AND j.id = i.job_id
AND j.fencing_token = i.token
AND j.lease_expires_at IS NOT NULL
RETURNING j.id, j.fencing_token, j.claimed_at
),
run AS (
INSERT INTO pgpulse_runs AS r (
id, job_id, scheduled_for, attempts, outcome, node_id, fencing_token, started_at,
finished_at, error, output, occurrences, last_scheduled_for, attempt_ended_at
)
OVERRIDING SYSTEM VALUE
SELECT i.run_id,
job.id,
i.run_scheduled_for,
CASE WHEN i.outcome <> 'skipped' THEN i.attempt ELSE 0 END,
i.outcome,
i.node,
job.fencing_token,
CASE WHEN i.outcome <> 'skipped' THEN job.claimed_at END,
CASE WHEN i.outcome <> 'retrying' THEN clock.now END,
i.error,
i.output,
CASE WHEN i.outcome = 'skipped' THEN i.skips ELSE 1 END,
CASE WHEN i.outcome = 'skipped' THEN i.skip_to END,
CASE WHEN i.outcome = 'retrying' THEN clock.now END
FROM input AS i
JOIN job ON job.id = i.job_id
CROSS JOIN clock
ON CONFLICT (job_id, scheduled_for) WHERE kind = 'scheduled' DO UPDATE
SET earlier_attempts = CASE WHEN excluded.attempts > r.attempts AND r.started_at IS NOT NULL
THEN coalesce(r.earlier_attempts, '[]'::jsonb) || jsonb_build_array(
jsonb_build_object(
'attempt', r.attempts, 'node_id', r.node_id,
'fencing_token', r.fencing_token, 'started_at', r.started_at,
'ended_at', coalesce(r.finished_at, r.attempt_ended_at),
'outcome', r.outcome, 'error', r.error,
'output', r.output))
ELSE r.earlier_attempts END,
attempts = excluded.attempts,
outcome = excluded.outcome,
node_id = excluded.node_id,
fencing_token = excluded.fencing_token,
started_at = excluded.started_at,
finished_at = excluded.finished_at,
error = excluded.error,
output = excluded.output,
occurrences = excluded.occurrences,
last_scheduled_for = excluded.last_scheduled_for,
attempt_ended_at = excluded.attempt_ended_at
RETURNING 1
),
route AS (
SELECT r.handler, r.shards::smallint[] AS shards
FROM unnest(%(route_handlers)s::text[], %(route_shards)s::text[]) AS r (handler, shards)
),
due AS (
SELECT c.id
FROM route AS r
CROSS JOIN LATERAL (
SELECT j.id, j.next_run_at
FROM pgpulse_jobs AS j
WHERE j.status = 'idle'
AND j.handler = r.handler
AND j.next_run_at <= coalesce(%(now)s::timestamptz, now())
AND j.shard_id = ANY(r.shards)
AND (
j.max_concurrency IS NULL
OR (
SELECT count(*)
FROM pgpulse_occurrences AS o
WHERE o.job_id = j.id
AND o.kind = 'scheduled'
) < j.max_concurrency
)
ORDER BY j.next_run_at
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED
) AS c
ORDER BY c.next_run_at
LIMIT %(limit)s
),
claimed AS (
UPDATE pgpulse_jobs AS j
SET status = 'running',
attempt = j.attempt + 1,
fencing_token = greatest(j.fencing_token, clock.epoch) + 1,
locked_by = %(node)s,
lease_expires_at = clock.now + make_interval(secs => %(lease)s),
run_id = coalesce(j.run_id, nextval('pgpulse_runs_id_seq') + clock.epoch),
claimed_at = clock.now,
updated_at = clock.now
FROM clock
WHERE j.id = ANY(ARRAY(SELECT id FROM due))
RETURNING j.id, j.tenant, j.name, j.schedule, j.timezone, j.handler, j.payload,
j.catch_up, j.backfill_limit,
extract(epoch FROM j.misfire_grace)::float8 AS misfire_grace,
j.max_attempts,
extract(epoch FROM j.retry_backoff)::float8 AS retry_backoff,
extract(epoch FROM j.timeout)::float8 AS timeout,
j.anchor_at, j.scheduled_for, j.attempt, j.fencing_token, j.run_id,
clock.now AS db_now,
j.spread,
j.not_after,
j.max_runs - j.runs_done AS runs_left,
CASE WHEN cardinality(j.calendars) > 0 THEN (
SELECT jsonb_agg(jsonb_build_object('name', c.name, 'dates', c.dates,
'country', c.country,
'subdivision', c.subdivision))
FROM pgpulse_calendars AS c
WHERE c.tenant = j.tenant
AND c.name = ANY(j.calendars)
) END AS calendars,
j.resume_mode,
j.resumed_at,
j.auto_pause_after,
j.failures,
j.overlap,
j.max_concurrency,
j.interruptions
)
SELECT claimed.*,
clock.now AS clock_now,
(
SELECT min(f.next_run_at)
FROM route AS r
CROSS JOIN LATERAL (
SELECT j.next_run_at
FROM pgpulse_jobs AS j
WHERE j.status = 'idle'
AND j.handler = r.handler
AND j.next_run_at > coalesce(%(now)s::timestamptz, now())
AND j.shard_id = ANY(r.shards)
ORDER BY j.next_run_at
LIMIT 1
) AS f
WHERE (SELECT count(*) FROM claimed) < %(limit)s
) AS next_due,
CASE WHEN row_number() OVER () = 1
THEN ARRAY(SELECT ARRAY[id, fencing_token] FROM job)
END AS written,
(
SELECT o.next_run_at
FROM pgpulse_occurrences AS o
JOIN pgpulse_jobs AS j ON j.id = o.job_id
JOIN route AS r ON r.handler = j.handler AND o.shard_id = ANY(r.shards)
WHERE o.lease_expires_at IS NULL
AND (SELECT count(*) FROM claimed) < %(limit)s
ORDER BY o.next_run_at
LIMIT 1
) AS occurrences_due
FROM clock
LEFT JOIN claimed ON true
ORDER BY claimed.scheduled_for;
