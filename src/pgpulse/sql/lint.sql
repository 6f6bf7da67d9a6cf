-- Reads of `pgpulse lint` and of the dry runs' 30-day diff (pgpulse.db.lint_reads): the
-- definitions, what their recent runs show, the handlers of live nodes, where jobs stand.

-- name: lint_definitions
-- The definition (durations in seconds) of every job of %(tenant)s (NULL: every tenant), as
-- lock_definitions reads it, without locking: lint only reads. Ordered by tenant and name.
SELECT {definition_columns}
FROM pgpulse_job_names n
JOIN pgpulse_jobs j ON j.id = n.job_id
WHERE (%(tenant)s::text IS NULL OR n.tenant = %(tenant)s)
ORDER BY n.tenant, n.name;

-- name: lint_stored
-- Which of the jobs (%(tenants)s[i], %(names)s[i]) exist: the upstreams lint's definitions name
-- (by the unique index of pgpulse_job_names).
SELECT n.tenant, n.name
FROM unnest(%(tenants)s::text[], %(names)s::text[]) AS w (tenant, name)
JOIN pgpulse_job_names AS n ON n.tenant = w.tenant AND n.name = w.name;

-- name: lint_observed
-- For each job among the names (%(tenants)s[i], %(names)s[i]) that has runs: over its last
-- %(last)s runs (pgpulse_runs_recent, job_id and id descending: at most %(last)s index rows per
-- job, whatever its history), the 99th percentile of the lag of scheduled runs (from the
-- spread instant to the first attempt's start, as list_runs measures it) and the 95th of the
-- finished runs' duration (the last attempt's), in seconds. The job's spread offset is the same
-- for each of its runs, so it is taken off the percentile once, not off each run.
SELECT j.tenant, j.name, count(*)::int AS runs,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY r.lag)
           - extract(epoch FROM pgpulse_spread_offset(j.id, j.spread))::float8 AS lag_p99,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY r.duration) AS duration_p95
FROM unnest(%(tenants)s::text[], %(names)s::text[]) AS w(tenant, name)
JOIN pgpulse_job_names n ON n.tenant = w.tenant AND n.name = w.name
JOIN pgpulse_jobs j ON j.id = n.job_id
CROSS JOIN LATERAL (
    SELECT CASE WHEN x.kind = 'scheduled' AND x.started_at IS NOT NULL
                THEN extract(epoch FROM
                         coalesce(((x.earlier_attempts -> 0) ->> 'started_at')::timestamptz,
                                  x.started_at)
                         - x.scheduled_for)::float8
           END AS lag,
           extract(epoch FROM x.finished_at - x.started_at)::float8 AS duration
    FROM pgpulse_runs x
    WHERE x.job_id = j.id
    ORDER BY x.id DESC
    LIMIT %(last)s
) AS r
GROUP BY j.id, j.tenant, j.name, j.spread;

-- name: live_handlers
-- The handlers some live node has (alive, heartbeat within its time-to-live, else %(ttl)s
-- seconds); shell only from a node that allows shell jobs (run or dry-run).
SELECT DISTINCT h.handler
FROM pgpulse_nodes p
CROSS JOIN LATERAL unnest(p.handlers || CASE WHEN p.shell <> 'off' THEN ARRAY['shell'] END)
    AS h(handler)
WHERE p.state = 'alive'
  AND p.last_heartbeat > now() - make_interval(secs => coalesce(p.ttl, %(ttl)s))
  AND (h.handler <> 'shell' OR p.shell <> 'off')
ORDER BY h.handler;

-- name: dry_run_jobs
-- Where each job %(ids)s stands (held occurrence, anchor, status), with its definition (as
-- lint_definitions): what a dry run's 30-day diff compares. By primary key.
SELECT {definition_columns}, j.scheduled_for
FROM pgpulse_jobs j
WHERE j.id = ANY(%(ids)s::bigint[])
ORDER BY j.id;
