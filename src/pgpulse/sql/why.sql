-- What `pgpulse why` reads about one job around an instant (pgpulse.db.why, in one read-only
-- repeatable-read transaction): each statement is an index lookup bounded by a LIMIT, never a
-- scan of history (docs/design.md, invariant 8). Clock rule (invariant 1): %(now)s from tests.

-- name: why_job
-- The database's instant, and the job %(id)s (or the job named (%(tenant)s, %(name)s) when
-- %(id)s is null) of tenant %(scope)s (null: any), its columns NULL when there is none, with
-- how many forked occurrences it runs (overlap allow: the claim waits at max_concurrency).
SELECT coalesce(%(now)s::timestamptz, now()) AS now,
       j.id, j.tenant, j.name, j.schedule, j.timezone, j.handler, j.status, j.spread,
       j.catch_up, extract(epoch FROM j.misfire_grace)::float8 AS misfire_grace, j.overlap,
       j.not_before, j.not_after, j.max_runs, j.runs_done, j.calendars, j.anchor_at,
       j.scheduled_for, j.next_run_at, j.attempt, j.fencing_token, j.run_id, j.locked_by,
       j.lease_expires_at, j.claimed_at, j.last_error, j.last_finished_at, j.created_at,
       j.paused_until, j.pause_reason, j.max_concurrency,
       -- under overlap allow, its forked occurrences (at most max_concurrency: by index)
       (SELECT count(*) FROM pgpulse_occurrences AS o
        WHERE o.job_id = j.id AND o.kind = 'scheduled') AS forks
FROM (SELECT 1) AS one
LEFT JOIN pgpulse_jobs AS j
       ON j.id = coalesce(%(id)s::bigint,
                          (SELECT n.job_id FROM pgpulse_job_names AS n
                           WHERE n.tenant = %(tenant)s AND n.name = %(name)s))
      AND (%(scope)s::text IS NULL OR j.tenant = %(scope)s);

-- name: why_runs
-- The scheduled run rows of job %(job_id)s next to %(at)s: the three at or before it and the
-- three after it, by the unique index pgpulse_runs_occurrence (a skipped summary row covers
-- its occurrences from scheduled_for through last_scheduled_for).
(SELECT r.id, r.scheduled_for, r.last_scheduled_for, r.occurrences, r.outcome, r.attempts,
        r.node_id, r.fencing_token, r.started_at, r.finished_at, r.error, r.output,
        coalesce(r.earlier_attempts, '[]'::jsonb) AS earlier_attempts, r.attempt_ended_at
 FROM pgpulse_runs AS r
 WHERE r.job_id = %(job_id)s AND r.kind = 'scheduled' AND r.scheduled_for <= %(at)s
 ORDER BY r.scheduled_for DESC
 LIMIT 3)
UNION ALL
(SELECT r.id, r.scheduled_for, r.last_scheduled_for, r.occurrences, r.outcome, r.attempts,
        r.node_id, r.fencing_token, r.started_at, r.finished_at, r.error, r.output,
        coalesce(r.earlier_attempts, '[]'::jsonb) AS earlier_attempts, r.attempt_ended_at
 FROM pgpulse_runs AS r
 WHERE r.job_id = %(job_id)s AND r.kind = 'scheduled' AND r.scheduled_for > %(at)s
 ORDER BY r.scheduled_for
 LIMIT 3);

-- name: why_history_of_job
-- The newest %(limit)s audit rows of job %(job_id)s (of %(scope)s, unless null), newest first,
-- by pgpulse_job_history_job.
SELECT h.job_id, h.at, h.action, h.source, h.actor, h.changes
FROM pgpulse_job_history AS h
WHERE h.job_id = %(job_id)s AND (%(scope)s::text IS NULL OR h.tenant = %(scope)s)
ORDER BY h.id DESC
LIMIT %(limit)s;

-- name: why_history_of_name
-- The newest %(limit)s audit rows recorded under the name (%(tenant)s, %(name)s), newest first,
-- by pgpulse_job_history_name: what is left of a deleted job.
SELECT h.job_id, h.at, h.action, h.source, h.actor, h.changes
FROM pgpulse_job_history AS h
WHERE h.tenant = %(tenant)s AND h.name = %(name)s
ORDER BY h.id DESC
LIMIT %(limit)s;

-- name: why_live_handlers
-- The handlers some live node advertises (alive, claiming without error, its heartbeat newer
-- than its time-to-live, %(ttl)s seconds when it registered none), and the calendars
-- %(calendars)s of tenant %(tenant)s as stored now.
SELECT coalesce((SELECT array_agg(DISTINCT h.handler)
                 FROM pgpulse_nodes AS n
                 CROSS JOIN LATERAL unnest(n.handlers) AS h (handler)
                 WHERE n.state = 'alive' AND n.claim_error IS NULL
                   AND n.last_heartbeat > coalesce(%(now)s::timestamptz, now())
                                          - make_interval(secs => coalesce(n.ttl, %(ttl)s))),
                '{}') AS handlers,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('name', c.name, 'dates', c.dates,
                                                     'country', c.country,
                                                     'subdivision', c.subdivision)), '[]')
        FROM pgpulse_calendars AS c
        WHERE c.tenant = %(tenant)s AND c.name = ANY(%(calendars)s::text[])) AS calendars;
