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
    SELECT id, tenant, admin, label, last_used_at
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
SELECT found.id, found.tenant, found.admin, found.label FROM found;

-- name: token_revoke
UPDATE pgpulse_api_tokens
SET revoked_at = now()
WHERE id = %(id)s AND revoked_at IS NULL
RETURNING id, prefix, tenant, admin;

-- name: token_revoked_at
-- When token %(id)s was revoked (no row: no such token), for the refusal of a second revoke.
SELECT revoked_at FROM pgpulse_api_tokens WHERE id = %(id)s;

-- name: token_list
SELECT id, prefix, tenant, admin, label, created_at, last_used_at, revoked_at
FROM pgpulse_api_tokens
ORDER BY id;

-- name: jobs
-- A page of jobs in (tenant, name) order after the keyset cursor, with how late the job is now
-- (due_lag, seconds; NULL unless idle and due) and the lag (from the spread instant to its first
-- attempt) and duration of its latest started run, and whether it is unroutable: idle, and no
-- live node advertises its handler (it waits, due, until one joins; a node row that recorded no
-- time-to-live is judged by NodeConfig's default, 10 s). %(id)s selects one job (show); the other
-- filters are optional: %(q)s finds the text in the name or the handler, case-insensitively.
-- key_limit, key_running: the limit on the job's concurrency key and the leases its jobs hold
-- (NULL without a limit), for "waiting for KEY (2 of 2 running)".
-- calendar_defs holds the rows of the job's exclusion calendars (as JSON objects, as the claim reads them),
-- so the upcoming occurrences shown skip what the claims will skip.
-- Pages are read in the order of pgpulse_job_names' primary key.
-- The job's row is j.*: the reader keeps the definition model's columns (durations in seconds)
-- and the state it shows (web/reads.py, shown_job), so a new definition column needs no edit here.
SELECT j.*,
       now() AS db_now,
       (SELECT jsonb_agg(to_jsonb(c)) FROM pgpulse_calendars AS c
        WHERE c.tenant = j.tenant AND c.name = ANY(j.calendars)) AS calendar_defs,
       -- the jobs that follow it (docs/chains.md), by the GIN index of after
       coalesce((SELECT array_agg(d.name ORDER BY d.name) FROM pgpulse_jobs AS d
                 WHERE d.after @> ARRAY[j.name] AND d.after <> '{}'
                   AND d.tenant = j.tenant), '{}') AS downstreams,
       CASE WHEN j.status = 'idle' AND j.next_run_at <= now()
            THEN extract(epoch FROM now() - j.next_run_at)::float8 END AS due_lag,
       last.lag AS last_lag, last.duration AS last_duration,
       j.status = 'idle' AND NOT EXISTS (
           SELECT 1
           FROM pgpulse_nodes AS p
           WHERE j.handler = ANY(p.handlers)
             AND p.state = 'alive'
             AND p.last_heartbeat > now() - make_interval(secs => coalesce(p.ttl, 10))
       ) AS unroutable,
       key.max_running AS key_limit,
       CASE WHEN key.max_running IS NOT NULL
            THEN pgpulse_key_running(j.tenant, j.concurrency_key) END AS key_running
FROM pgpulse_job_names n
JOIN pgpulse_jobs j ON j.id = n.job_id
LEFT JOIN LATERAL (
    SELECT extract(epoch FROM coalesce((r.earlier_attempts -> 0 ->> 'started_at')::timestamptz,
                                       r.started_at) - r.scheduled_for
                              - pgpulse_spread_offset(j.id, j.spread))::float8 AS lag,
           extract(epoch FROM r.finished_at - r.started_at)::float8 AS duration
    FROM pgpulse_runs r
    WHERE r.job_id = j.id AND r.started_at IS NOT NULL
    ORDER BY r.id DESC
    LIMIT 1
) last ON true
LEFT JOIN pgpulse_limits AS key ON key.tenant = j.tenant AND key.key = j.concurrency_key
WHERE (%(tenant)s::text IS NULL OR n.tenant = %(tenant)s)
  AND (%(id)s::bigint IS NULL OR n.job_id = %(id)s)
  AND (%(status)s::text IS NULL OR j.status = %(status)s)
  AND (%(handler)s::text IS NULL OR j.handler = %(handler)s)
  AND (%(source)s::text IS NULL OR j.source = %(source)s)
  AND (%(last_outcome)s::text IS NULL OR j.last_outcome = %(last_outcome)s)
  AND (%(name_prefix)s::text IS NULL OR starts_with(n.name, %(name_prefix)s))
  AND (%(q)s::text IS NULL
       OR strpos(lower(n.name), lower(%(q)s)) > 0
       OR strpos(lower(j.handler), lower(%(q)s)) > 0)
  AND (%(after_tenant)s::text IS NULL OR (n.tenant, n.name) > (%(after_tenant)s, %(after_name)s))
ORDER BY n.tenant, n.name
LIMIT %(limit)s;

-- name: runs_recorded
-- A page of runs is two statements, read in one snapshot and merged by id (web/reads.py,
-- Reads._runs): this one, the recorded runs, and runs_running, the attempts running now (as
-- pgpulse_runs_live shows them, outcome 'running'), whose own run rows are hidden meanwhile.
-- Each is newest first (id order) after the keyset cursor %(before_id)s, at most %(limit)s rows.
-- The time range applies to scheduled_for (the occurrence), half-open: since <= scheduled_for
-- < until. The job filters (handler, source, %(q)s in the name) apply to the run's job. A
-- skipped summary row stands for its occurrences from scheduled_for through last_scheduled_for.
-- lag = first_started_at - scheduled_for - the job's spread offset: from the spread instant to
-- the run's FIRST attempt (a retried run that started on time is not late); duration =
-- finished_at - started_at of its latest attempt; earlier_attempts lists the attempts before
-- the latest (migration run_attempts). No lag for a backfill's run, and the definition's
-- revision when the run started (queries.sql, list_runs).
-- pgpulse_runs is walked backwards on its primary key (or pgpulse_runs_recent for one job),
-- stopping at the page's end, with the view's rule (hide the row of an occurrence running
-- again) as a test on the joined job row; ORDER BY over the view instead sorted every run kept
-- (0.6 s a page at 200,000 runs).
SELECT {run_page_columns}
FROM (
    SELECT r.id, r.job_id, j.tenant, j.name, j.handler, j.source, r.scheduled_for, r.attempts,
           r.outcome, r.node_id, r.occurrences, r.last_scheduled_for, r.fencing_token,
           r.started_at, r.finished_at,
           coalesce((r.earlier_attempts -> 0 ->> 'started_at')::timestamptz, r.started_at)
               AS first_started_at,
           r.attempt_ended_at, r.error, r.output, r.earlier_attempts, r.kind, j.spread
    FROM pgpulse_runs r
    JOIN pgpulse_jobs j ON j.id = r.job_id
    WHERE NOT (j.status = 'running' AND j.scheduled_for = r.scheduled_for
               AND r.kind = 'scheduled')
      AND NOT EXISTS (SELECT 1 FROM pgpulse_occurrences o
                      WHERE o.id = r.id AND o.lease_expires_at IS NOT NULL)
      AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s)
      AND (%(job_id)s::bigint IS NULL OR r.job_id = %(job_id)s)
      AND (%(run_id)s::bigint IS NULL OR r.id = %(run_id)s)
      AND (%(outcome)s::text IS NULL OR r.outcome = %(outcome)s)
      AND (%(handler)s::text IS NULL OR j.handler = %(handler)s)
      AND (%(source)s::text IS NULL OR j.source = %(source)s)
      AND (%(q)s::text IS NULL OR strpos(lower(j.name), lower(%(q)s)) > 0)
      AND (%(since)s::timestamptz IS NULL OR r.scheduled_for >= %(since)s)
      AND (%(until)s::timestamptz IS NULL OR r.scheduled_for < %(until)s)
      AND (%(before_id)s::bigint IS NULL OR r.id < %(before_id)s)
    ORDER BY r.id DESC
    LIMIT %(limit)s
) p
ORDER BY p.id DESC;

-- name: runs_running
-- The attempts running now, for a page of runs (runs_recorded says how a page is read, and
-- what lag, duration, earlier_attempts and revision are): one row per running job
-- (pgpulse_jobs_leases) and one per running extra occurrence (pgpulse_occurrences_leases), as
-- pgpulse_runs_live's running part (through the view, the planner may scan pgpulse_runs for
-- stored rows whose outcome is 'running'). Their attempts so far are the run row's, the latest
-- appended: the row of the job's occurrence, or the occurrence's own (each looked up on its
-- index, never pulled up into a join over pgpulse_runs). Few rows: the filters apply to all.
SELECT {run_page_columns}
FROM (
    SELECT run.id, run.job_id, j.tenant, j.name, j.handler, j.source, run.scheduled_for,
           run.attempts, 'running'::text AS outcome, run.node_id, 1::bigint AS occurrences,
           NULL::timestamptz AS last_scheduled_for, run.fencing_token, run.started_at,
           NULL::timestamptz AS finished_at,
           coalesce((prior.attempts -> 0 ->> 'started_at')::timestamptz, run.started_at)
               AS first_started_at,
           NULL::timestamptz AS attempt_ended_at, NULL::text AS error, NULL::text AS output,
           prior.attempts AS earlier_attempts, run.kind, j.spread
    FROM (SELECT j.run_id AS id, j.id AS job_id, j.scheduled_for, j.attempt AS attempts,
                 j.locked_by AS node_id, j.fencing_token, j.claimed_at AS started_at,
                 'scheduled'::text AS kind, NULL::bigint AS occurrence
          FROM pgpulse_jobs j
          WHERE j.status = 'running'
          UNION ALL
          SELECT o.id, o.job_id, o.scheduled_for, o.attempt, o.locked_by, o.fencing_token,
                 o.claimed_at, o.kind, o.id
          FROM pgpulse_occurrences o
          WHERE o.lease_expires_at IS NOT NULL) run
    JOIN pgpulse_jobs j ON j.id = run.job_id
    LEFT JOIN LATERAL (
        SELECT coalesce(p.earlier_attempts, '[]'::jsonb) || jsonb_build_array(
                   jsonb_build_object(
                       'attempt', p.attempts, 'node_id', p.node_id,
                       'fencing_token', p.fencing_token, 'started_at', p.started_at,
                       'ended_at', p.attempt_ended_at, 'outcome', p.outcome,
                       'error', p.error, 'output', p.output)) AS attempts
        FROM (SELECT * FROM pgpulse_runs p  -- the job's occurrence: at most one row
              WHERE run.occurrence IS NULL AND p.job_id = run.job_id
                AND p.scheduled_for = run.scheduled_for AND p.kind = 'scheduled'
              UNION ALL
              SELECT * FROM pgpulse_runs p WHERE p.id = run.occurrence) p
        WHERE p.started_at IS NOT NULL
        LIMIT 1
    ) prior ON true
) p
WHERE (%(tenant)s::text IS NULL OR p.tenant = %(tenant)s)
  AND (%(job_id)s::bigint IS NULL OR p.job_id = %(job_id)s)
  AND (%(run_id)s::bigint IS NULL OR p.id = %(run_id)s)
  AND (%(outcome)s::text IS NULL OR %(outcome)s = 'running')
  AND (%(handler)s::text IS NULL OR p.handler = %(handler)s)
  AND (%(source)s::text IS NULL OR p.source = %(source)s)
  AND (%(q)s::text IS NULL OR strpos(lower(p.name), lower(%(q)s)) > 0)
  AND (%(since)s::timestamptz IS NULL OR p.scheduled_for >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR p.scheduled_for < %(until)s)
  AND (%(before_id)s::bigint IS NULL OR p.id < %(before_id)s)
ORDER BY p.id DESC
LIMIT %(limit)s;

-- name: grid_runs
-- The runs of job %(job_id)s whose occurrences fall in (%(after)s, %(until)s], oldest first
-- (the occurrence grid): the recorded ones (as for `runs`, the row of an occurrence running
-- again is hidden), the attempt running now, and the skipped summary that starts at or before
-- %(after)s and reaches into the range: it can only be the newest row starting there, as rows
-- never overlap. The schedule's own runs only (kind 'scheduled': a trigger's or a backfill's run
-- is a row of its own beside them). Every part is found on pgpulse_runs' (job_id,
-- scheduled_for) key (pgpulse_runs_occurrence, of those rows) or the job's primary key; at most
-- %(limit)s rows.
SELECT g.id, g.scheduled_for, g.outcome, g.attempts, g.node_id, g.occurrences,
       coalesce(g.last_scheduled_for, g.scheduled_for) AS last_scheduled_for,
       g.started_at, g.finished_at, g.error,
       extract(epoch FROM g.finished_at - g.started_at)::float8 AS duration,
       extract(epoch FROM g.first_started_at - g.scheduled_for)::float8 AS lag
FROM (
    (SELECT r.id, r.scheduled_for, r.outcome, r.attempts, r.node_id, r.occurrences,
            r.last_scheduled_for, r.started_at, r.finished_at, r.error,
            coalesce((r.earlier_attempts -> 0 ->> 'started_at')::timestamptz, r.started_at) AS first_started_at
    FROM pgpulse_runs r
    JOIN pgpulse_jobs j ON j.id = r.job_id
    WHERE r.job_id = %(job_id)s
      AND r.scheduled_for > %(after)s
      AND r.scheduled_for <= %(until)s
      AND r.kind = 'scheduled'
      AND NOT (j.status = 'running' AND j.scheduled_for = r.scheduled_for)
    ORDER BY r.scheduled_for
    LIMIT %(limit)s)
    UNION ALL
    (SELECT j.run_id, j.scheduled_for, 'running', j.attempt, j.locked_by, 1::bigint,
            NULL::timestamptz, j.claimed_at, NULL::timestamptz, NULL::text,
            coalesce(
                (SELECT (p.earlier_attempts -> 0 ->> 'started_at')::timestamptz
                 FROM pgpulse_runs p
                 WHERE p.job_id = j.id AND p.scheduled_for = j.scheduled_for
                   AND p.kind = 'scheduled'),
                (SELECT p.started_at
                 FROM pgpulse_runs p
                 WHERE p.job_id = j.id AND p.scheduled_for = j.scheduled_for
                   AND p.kind = 'scheduled'),
                j.claimed_at)
    -- pgpulse_runs_live's running part, for this job
    FROM pgpulse_jobs j
    WHERE j.id = %(job_id)s
      AND j.status = 'running'
      AND j.scheduled_for > %(after)s
      AND j.scheduled_for <= %(until)s)
    UNION ALL
    (SELECT r.id, r.scheduled_for, r.outcome, r.attempts, r.node_id, r.occurrences,
            r.last_scheduled_for, r.started_at, r.finished_at, r.error, r.started_at
    FROM pgpulse_runs r
    WHERE r.job_id = %(job_id)s
      AND r.scheduled_for <= %(after)s
      AND r.kind = 'scheduled'
    ORDER BY r.scheduled_for DESC
    LIMIT 1)
) g
WHERE g.scheduled_for > %(after)s
   OR (g.outcome = 'skipped' AND g.last_scheduled_for > %(after)s)
ORDER BY g.scheduled_for
LIMIT %(limit)s;

-- name: recent_runs
-- The newest %(per_job)s recorded runs of each job of %(job_ids)s (the jobs page's strip of
-- recent outcomes; the caller passes only jobs its token may see), oldest first per job: one
-- walk of pgpulse_runs_recent per job.
SELECT r.job_id, r.id, r.outcome, r.scheduled_for, r.occurrences, r.error
FROM unnest(%(job_ids)s::bigint[]) AS wanted (id)
CROSS JOIN LATERAL (
    SELECT r.job_id, r.id, r.outcome, r.scheduled_for, r.occurrences, r.error
    FROM pgpulse_runs r
    WHERE r.job_id = wanted.id
    ORDER BY r.id DESC
    LIMIT %(per_job)s
) r
ORDER BY r.job_id, r.id;

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
