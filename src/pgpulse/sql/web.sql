-- Statements of the HTTP API and dashboard (pgpulse.web), as named blocks ("-- name: NAME").
-- Reads only, plus the API token table: every job and run write goes through pgpulse.store.
-- Tenant scoping: %(tenant)s NULL means "every tenant" (admin tokens); a tenant token always
-- passes its own tenant, so another tenant's rows are simply not found.

-- name: token_insert
INSERT INTO pgpulse_api_tokens (token_sha256, prefix, tenant, admin, label)
VALUES (%(hash)s, %(prefix)s, %(tenant)s, %(admin)s, %(label)s)
RETURNING id, prefix, tenant, admin, label, created_at;

-- name: token_authenticate
-- The live (unrevoked) token with this hash: one round trip per request, so a revocation takes
-- effect on the next request. last_used_at is touched at most once a minute.
WITH found AS (
    SELECT id, tenant, admin, last_used_at
    FROM pgpulse_api_tokens
    WHERE token_sha256 = %(hash)s AND revoked_at IS NULL
), touched AS (
    UPDATE pgpulse_api_tokens t
    SET last_used_at = now()
    FROM found
    WHERE t.id = found.id
      AND (found.last_used_at IS NULL OR found.last_used_at < now() - interval '60 seconds')
    RETURNING t.id
)
SELECT found.id, found.tenant, found.admin FROM found;

-- name: token_revoke
UPDATE pgpulse_api_tokens
SET revoked_at = now()
WHERE id = %(id)s AND revoked_at IS NULL
RETURNING id, prefix, tenant, admin;

-- name: token_list
SELECT id, prefix, tenant, admin, label, created_at, last_used_at, revoked_at
FROM pgpulse_api_tokens
ORDER BY id;

-- name: jobs
-- A page of jobs in (tenant, name) order after the keyset cursor, with how late the job is now
-- (due_lag, seconds; NULL unless idle and due) and the lag and duration of its latest started
-- run. %(id)s selects one job (show); the other filters are optional. Pages are read in the
-- order of pgpulse_job_names' primary key.
SELECT j.id, j.tenant, j.name, j.schedule, j.timezone, j.handler, j.payload, j.catch_up,
       j.backfill_limit, extract(epoch FROM j.misfire_grace)::float8 AS misfire_grace,
       j.max_attempts, extract(epoch FROM j.retry_backoff)::float8 AS retry_backoff,
       extract(epoch FROM j.timeout)::float8 AS timeout, j.overlap, j.max_concurrency,
       j.source, j.status, j.anchor_at,
       j.scheduled_for, j.next_run_at, j.attempt, j.locked_by, j.lease_expires_at,
       j.last_outcome, j.last_error, j.last_finished_at, j.created_at, j.updated_at,
       CASE WHEN j.status = 'idle' AND j.next_run_at <= now()
            THEN extract(epoch FROM now() - j.next_run_at)::float8 END AS due_lag,
       last.lag AS last_lag, last.duration AS last_duration
FROM pgpulse_job_names n
JOIN pgpulse_jobs j ON j.id = n.job_id
LEFT JOIN LATERAL (
    SELECT extract(epoch FROM r.started_at - r.scheduled_for)::float8 AS lag,
           extract(epoch FROM r.finished_at - r.started_at)::float8 AS duration
    FROM pgpulse_runs r
    WHERE r.job_id = j.id AND r.started_at IS NOT NULL
    ORDER BY r.id DESC
    LIMIT 1
) last ON true
WHERE (%(tenant)s::text IS NULL OR n.tenant = %(tenant)s)
  AND (%(id)s::bigint IS NULL OR n.job_id = %(id)s)
  AND (%(status)s::text IS NULL OR j.status = %(status)s)
  AND (%(handler)s::text IS NULL OR j.handler = %(handler)s)
  AND (%(name_prefix)s::text IS NULL OR starts_with(n.name, %(name_prefix)s))
  AND (%(after_tenant)s::text IS NULL OR (n.tenant, n.name) > (%(after_tenant)s, %(after_name)s))
ORDER BY n.tenant, n.name
LIMIT %(limit)s;

-- name: runs
-- A page of runs, newest first (id order), after the keyset cursor %(before_id)s. The time range
-- applies to scheduled_for (the occurrence), half-open: since <= scheduled_for < until.
-- lag = started_at - scheduled_for of the latest attempt; output only when %(with_output)s.
-- Runs in progress are included (pgpulse_runs_live: outcome 'running'). A skipped summary row stands
-- for its occurrences from scheduled_for through last_scheduled_for.
SELECT r.id, r.job_id, j.tenant, j.name, r.scheduled_for, r.attempts, r.outcome, r.node_id,
       r.occurrences, coalesce(r.last_scheduled_for, r.scheduled_for) AS last_scheduled_for,
       r.fencing_token, r.started_at, r.finished_at,
       extract(epoch FROM r.finished_at - r.started_at)::float8 AS duration,
       extract(epoch FROM r.started_at - r.scheduled_for)::float8 AS lag,
       r.error, CASE WHEN %(with_output)s THEN r.output END AS output, r.kind
FROM pgpulse_runs_live r
JOIN pgpulse_jobs j ON j.id = r.job_id
WHERE (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s)
  AND (%(job_id)s::bigint IS NULL OR r.job_id = %(job_id)s)
  AND (%(run_id)s::bigint IS NULL OR r.id = %(run_id)s)
  AND (%(outcome)s::text IS NULL OR r.outcome = %(outcome)s)
  AND (%(since)s::timestamptz IS NULL OR r.scheduled_for >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR r.scheduled_for < %(until)s)
  AND (%(before_id)s::bigint IS NULL OR r.id < %(before_id)s)
ORDER BY r.id DESC
LIMIT %(limit)s;

-- name: attention
-- Jobs that need a person: failed (cannot be scheduled), last run failed or fenced, or idle and
-- overdue by more than %(overdue)s seconds (no live node owns their shard, or nodes are full).
SELECT j.id, j.tenant, j.name, j.status, j.last_outcome, j.last_error, j.last_finished_at,
       j.next_run_at, extract(epoch FROM now() - j.next_run_at)::float8 AS overdue
FROM pgpulse_jobs j
WHERE (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s)
  AND (j.status = 'failed'
       OR j.last_outcome IN ('failed', 'fenced')
       OR (j.status = 'idle' AND j.next_run_at < now() - make_interval(secs => %(overdue)s)))
ORDER BY j.last_finished_at DESC NULLS LAST, j.tenant, j.name
LIMIT %(limit)s;
