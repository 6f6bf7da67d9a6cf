-- The statements of runs that follow runs (docs/chains.md; migration 0022), loaded into
-- pgpulse.sql.QUERIES beside queries.sql. Clock and epochs as there: %(now)s is NULL in
-- production (the database's now()); a new run id is the sequence's value + the epoch.

-- name: flow_down
-- Sent after finish_jobs or finish_occurrences, in the same transaction (ClaimStore's claim
-- step), for the ended attempts of jobs that others follow (%(flows)s: a JSON array of {run_id,
-- token, interval_start}). An element counts only if its run row now says succeeded, failed or
-- fenced under its claim's token: its fenced outcome is written (by this transaction, or by an
-- earlier one whose send is repeated). Per (upstream run, downstream job) one pgpulse_flows row,
-- inserted ON CONFLICT DO NOTHING: a run flows down once, however often this is sent. Each fresh
-- flow joins its downstream's wait row for (job, scheduled_for), locked by the upsert (two
-- upstreams ending at once: the second sees the first's names). A join that is now ready gets one
-- pending occurrence (kind 'after', in the job's 'after' batch, due at once, carrying the
-- upstream run ids and the data interval's start); one now failed gets a skipped run naming the
-- upstream. Returns how many occurrences it made.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now, {epoch} AS epoch
), up AS (
    SELECT r.id AS run_id, r.scheduled_for, r.outcome = 'succeeded' AS ok, j.tenant, j.name,
           i.interval_start
    FROM json_to_recordset(%(flows)s::json) AS i (run_id bigint, token bigint,
                                                  interval_start timestamptz)
    JOIN pgpulse_runs AS r ON r.id = i.run_id AND r.fencing_token = i.token
    JOIN pgpulse_jobs AS j ON j.id = r.job_id
    WHERE r.outcome IN ('succeeded', 'failed', 'fenced')
), flow AS (
    INSERT INTO pgpulse_flows (upstream_run_id, job_id)
    SELECT up.run_id, d.id
    FROM up
    JOIN pgpulse_jobs AS d ON d.after @> ARRAY[up.name] AND d.after <> '{}'
                          AND d.tenant = up.tenant
    ON CONFLICT DO NOTHING
    RETURNING upstream_run_id, job_id
), joined AS (
    INSERT INTO pgpulse_after_waits AS w (job_id, scheduled_for, needs, succeeded, runs, failed,
                                          interval_start, deadline, state)
    SELECT g.job_id, g.scheduled_for, g.needs, g.succeeded, g.runs, g.failed, g.interval_start,
           clock.now + g.after_timeout, pgpulse_after_state(g.succeeded, g.failed, g.needs)
    FROM (SELECT f.job_id, up.scheduled_for, cardinality(d.after) AS needs, d.after_timeout,
                 coalesce(array_agg(up.name) FILTER (WHERE up.ok), '{}') AS succeeded,
                 array_agg(up.run_id) AS runs,
                 min(quote_literal(up.name) || ' (run ' || up.run_id || ')')
                     FILTER (WHERE NOT up.ok) AS failed,
                 min(up.interval_start) AS interval_start
          FROM flow AS f
          JOIN up ON up.run_id = f.upstream_run_id
          JOIN pgpulse_jobs AS d ON d.id = f.job_id
          GROUP BY f.job_id, up.scheduled_for, d.after, d.after_timeout) AS g, clock
    ON CONFLICT (job_id, scheduled_for) DO UPDATE
    SET succeeded = CASE WHEN w.state = 'waiting' THEN w.succeeded ELSE '{}' END
                    || excluded.succeeded,
        runs = CASE WHEN w.state = 'waiting' THEN w.runs ELSE '{}' END || excluded.runs,
        failed = CASE WHEN w.state = 'waiting' THEN w.failed END,
        interval_start = CASE WHEN w.state = 'waiting'
                              THEN least(w.interval_start, excluded.interval_start)
                              ELSE excluded.interval_start END,
        deadline = CASE WHEN w.state = 'waiting' THEN w.deadline ELSE excluded.deadline END,
        state = pgpulse_after_state(
            CASE WHEN w.state = 'waiting' THEN w.succeeded ELSE '{}' END || excluded.succeeded,
            coalesce(CASE WHEN w.state = 'waiting' THEN w.failed END, excluded.failed),
            excluded.needs),
        updated_at = excluded.updated_at
    RETURNING w.job_id, w.scheduled_for, w.runs, w.failed, w.interval_start, w.state
), batch AS (
    INSERT INTO pgpulse_batches AS b (job_id, kind, max_concurrency)
    SELECT DISTINCT j.job_id, 'after', 1
    FROM joined AS j
    WHERE j.state = 'ready'
    ON CONFLICT (job_id) WHERE kind = 'after' DO UPDATE
    SET max_concurrency = b.max_concurrency
    RETURNING b.id, b.job_id
), made AS (
    INSERT INTO pgpulse_occurrences (id, job_id, kind, scheduled_for, batch_id, next_run_at,
                                     upstream_runs, data_interval_start)
    SELECT nextval('pgpulse_runs_id_seq') + clock.epoch, j.job_id, 'after', j.scheduled_for,
           batch.id, clock.now, j.runs, j.interval_start
    FROM joined AS j
    JOIN batch ON batch.job_id = j.job_id
    CROSS JOIN clock
    WHERE j.state = 'ready'
    RETURNING job_id
), skipped AS (
    INSERT INTO pgpulse_runs (id, job_id, scheduled_for, attempts, outcome, error, finished_at,
                              kind)
    OVERRIDING SYSTEM VALUE
    SELECT nextval('pgpulse_runs_id_seq') + clock.epoch, j.job_id, j.scheduled_for, 0,
           'skipped', 'upstream ' || j.failed || ' did not succeed', clock.now, 'after'
    FROM joined AS j, clock
    WHERE j.state = 'failed'
)
SELECT count(*) AS made, count(pg_notify('pgpulse_wakeup', job_id::text)) AS woken
FROM made;

-- name: expire_after_waits
-- The sweep's part for joins (ClaimStore.heartbeat): a downstream occurrence still waiting for
-- some of its upstreams %(older_than)s seconds after its deadline (the first upstream's success +
-- after_timeout) is expired and recorded as a skipped run naming the upstreams it still waited
-- for. At most %(limit)s per sweep; locks the wait rows it expires (SKIP LOCKED: a flow_down
-- joining one now decides it first). Returns how many it expired (not leases: not reaped).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now, {epoch} AS epoch
), due AS (
    SELECT w.job_id, w.scheduled_for
    FROM pgpulse_after_waits AS w, clock
    WHERE w.state = 'waiting'
      AND w.deadline < clock.now - make_interval(secs => %(older_than)s)
    ORDER BY w.deadline
    LIMIT %(limit)s
    FOR UPDATE OF w SKIP LOCKED
), expired AS (
    UPDATE pgpulse_after_waits AS w
    SET state = 'expired', updated_at = clock.now
    FROM due, clock
    WHERE (w.job_id, w.scheduled_for) = (due.job_id, due.scheduled_for)
    RETURNING w.job_id, w.scheduled_for, w.succeeded
), skipped AS (
    INSERT INTO pgpulse_runs (id, job_id, scheduled_for, attempts, outcome, error, finished_at,
                              kind)
    OVERRIDING SYSTEM VALUE
    SELECT nextval('pgpulse_runs_id_seq') + clock.epoch, e.job_id, e.scheduled_for, 0,
           'skipped',
           'after_timeout (' || extract(epoch FROM j.after_timeout)::bigint || ' s) passed '
               || 'waiting for upstream ' || (
                   SELECT string_agg(quote_literal(a), ', ' ORDER BY a)
                   FROM unnest(j.after) AS a
                   WHERE a <> ALL(e.succeeded)),
           clock.now, 'after'
    FROM expired AS e
    JOIN pgpulse_jobs AS j ON j.id = e.job_id
    CROSS JOIN clock
)
SELECT count(*) AS expired FROM expired;

-- name: lock_chains
-- The advisory lock of tenant %(tenant)s's chains, held to the end of the transaction: sent
-- before check_chains in its own statement, so that check_chains' snapshot, taken after the
-- lock is granted, sees the edges of the writer that held it before. Two writers that each add
-- one edge of a cycle are so judged one after the other, and the second is refused.
SELECT pg_advisory_xact_lock(hashtextextended('pgpulse_after:' || %(tenant)s, 0));

-- name: mark_followed
-- At the creation of jobs %(names)s of tenant %(tenant)s (after lock_chains, in the writing
-- transaction): each that a job of the tenant already follows (a job deleted and created
-- again under its name) is marked followed (has_downstreams), so its runs flow down.
UPDATE pgpulse_jobs AS u
SET has_downstreams = true
WHERE u.tenant = %(tenant)s
  AND u.name = ANY(%(names)s::text[])
  AND NOT u.has_downstreams
  AND EXISTS (SELECT 1 FROM pgpulse_jobs AS d
              WHERE d.after @> ARRAY[u.name] AND d.after <> '{}' AND d.tenant = u.tenant);

-- name: check_chains
-- At the write of jobs that follow others (Store.upsert_jobs, reconcile; in the writing
-- transaction, after the writes and lock_chains), for tenant %(tenant)s: the jobs named in the
-- `after` lists of %(names)s that do not exist (unknown), and the first cycle through one of
-- %(names)s (a path of job names that ends where it began, each job followed by one it names).
-- Marks the upstreams named as followed (has_downstreams), so their claims send flow_down. The
-- caller refuses (rolling back) when it returns an unknown name or a cycle.
WITH named AS (
    SELECT DISTINCT a.name
    FROM pgpulse_jobs AS d, unnest(d.after) AS a (name)
    WHERE d.tenant = %(tenant)s AND d.name = ANY(%(names)s::text[])
), marked AS (
    UPDATE pgpulse_jobs AS u
    SET has_downstreams = true
    FROM named
    WHERE u.tenant = %(tenant)s AND u.name = named.name AND NOT u.has_downstreams
    RETURNING u.name
), walk AS (
    WITH RECURSIVE path (name, trail) AS (
        SELECT d.name, ARRAY[d.name]
        FROM pgpulse_jobs AS d
        WHERE d.tenant = %(tenant)s
          AND d.name = ANY(%(names)s::text[]) AND d.after <> '{}'
        UNION ALL
        SELECT u.name, p.trail || u.name
        FROM path AS p
        JOIN pgpulse_jobs AS d ON d.tenant = %(tenant)s AND d.name = p.name
        CROSS JOIN unnest(d.after) AS u (name)
        WHERE p.name <> ALL(p.trail[1:cardinality(p.trail) - 1]) AND cardinality(p.trail) <= 1000
    )
    SELECT trail FROM path WHERE cardinality(trail) > 1 AND name = trail[1] LIMIT 1
)
SELECT (SELECT array_agg(n.name ORDER BY n.name)
        FROM named AS n
        WHERE NOT EXISTS (SELECT 1 FROM pgpulse_job_names AS k
                          WHERE k.tenant = %(tenant)s AND k.name = n.name)) AS unknown,
       (SELECT trail FROM walk) AS cycle,
       (SELECT count(*) FROM marked) AS marked;

-- name: job_followers
-- The names of the jobs of tenant %(tenant)s whose after names job %(name)s, in order (by the GIN
-- index of after): what a delete of it leaves waiting (docs/chains.md).
SELECT d.name
FROM pgpulse_jobs AS d
WHERE d.after @> ARRAY[%(name)s::text] AND d.after <> '{}' AND d.tenant = %(tenant)s
ORDER BY d.name;
