-- Every statement Pulse sends, as named blocks ("-- name: NAME"), loaded once by pgpulse.sql.
-- Clock rule (design.md, invariant 1): instants come from the database's now(). Tests may pass
-- a fixed instant as %(now)s; production code always passes NULL.

-- name: finish_and_claim
-- One step of a node's claim loop, in one statement: one round trip and one (implicit)
-- transaction, so a busy node pays one commit per batch of runs ended and started. It ends a batch
-- of attempts, fenced, then claims up to %(limit)s due idle jobs of the shards %(shards)s for
-- node %(node)s.
--
-- Finish (input, job, run, skipped). The batch is one JSON array (%(outcomes)s, an object per
-- attempt: ClaimStore.finish_and_claim), one text value rather than a dozen arrays. An
-- element changes nothing unless its job still runs under its token: the late write of a node
-- that lost its lease is a no-op. Per element, the job row moves to its next state (next_run_at NULL: retry_in
-- seconds from now); the occurrence's run row is written with the attempt's outcome, inserted or
-- updated over an earlier attempt's, taking the claim's values (run id, occurrence, attempt,
-- node, instant) from the job row as the statement's snapshot shows it, before `job` changed it;
-- and the occurrences the element skips, however many, get one summary row: "skips"
-- occurrences from "skip_from" through "skip_to" (NULL for one). When the run's own occurrence
-- is skipped (outcome 'skipped'), it is the first of them and its row is the summary.
--
-- Claim (due, claimed). Rows are locked SKIP LOCKED, so a poller never waits on another, and move
-- to running with a new lease and fencing token. A job under overlap allow (max_concurrency set)
-- is not claimed while it has max_concurrency forked occurrences, running or pending: its
-- backlog stays on the job row, where its catch-up policy decides it (docs/states.md). The first claim of an occurrence draws its run
-- id from pgpulse_runs' sequence; later ones (a retry, a re-claim after a lost lease or a
-- hand-back) keep it: every statement that moves a job to another occurrence clears run_id, as it
-- resets attempt. Every CTE sees one snapshot, so a job finished here is claimed at the next step
-- (the caller knows when it is due from the outcome it sent).
--
-- Plans. A node's claim session plans this statement once, as a generic plan
-- (claims.CLAIM_SESSION_SETTINGS), so every access is written to stay an index lookup whatever
-- the statistics say: job rows are found by id = ANY(ARRAY(...)) on the primary key (joined to
-- `input` or `due` instead, a generic plan may scan or merge the whole key); "still running" is
-- written lease_expires_at IS NOT NULL (the same, by the table's CHECK), which keeps the planner
-- off pgpulse_jobs_leases (every running job); the due bound is written inline rather than
-- joined from clock, so it is an index condition and the scan of pgpulse_jobs_due stops at the
-- first row not yet due, however many are stored.
--
-- One row per claimed job (ClaimedJob's fields, db_now and the overlap policy among them), then
-- the clock, oldest occurrence first; nothing claimed gives one row whose id is NULL. When fewer than %(limit)s were claimed, next_due is the earliest future due instant of
-- those shards (NULL if none), so an idle node knows how long to sleep without a second
-- statement. `written`, the (job id, fencing token) of each outcome that took effect, is on the
-- first row only. occurrences_due is the earliest due instant of a pending extra occurrence of
-- those shards (due already or not; NULL if none), when fewer than %(limit)s were claimed.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
),
input AS (
    SELECT *
    FROM json_to_recordset(%(outcomes)s::json) AS i (
        job_id bigint, token bigint, status text, scheduled_for timestamptz,
        next_run_at timestamptz, retry_in float8, reset_attempt bool, outcome text,
        error text, output text, skips bigint, skip_from timestamptz, skip_to timestamptz,
        skip_reason text
    )
),
job AS (
    UPDATE pgpulse_jobs AS j
    SET status = i.status,
        scheduled_for = i.scheduled_for,
        next_run_at = coalesce(i.next_run_at, clock.now + make_interval(secs => i.retry_in)),
        attempt = CASE WHEN i.reset_attempt THEN 0 ELSE j.attempt END,
        run_id = CASE WHEN i.reset_attempt THEN NULL ELSE j.run_id END,
        locked_by = NULL,
        lease_expires_at = NULL,
        last_outcome = i.outcome,
        last_error = i.error,
        last_finished_at = clock.now,
        updated_at = clock.now
    FROM input AS i, clock
    WHERE j.id = ANY(ARRAY(SELECT job_id FROM input))
      AND j.id = i.job_id
      AND j.fencing_token = i.token
      AND j.lease_expires_at IS NOT NULL
    RETURNING j.id, j.fencing_token
),
run AS (
    INSERT INTO pgpulse_runs AS r (
        id, job_id, scheduled_for, attempts, outcome, node_id, fencing_token, started_at,
        finished_at, error, output, occurrences, last_scheduled_for
    )
    OVERRIDING SYSTEM VALUE
    SELECT o.run_id,
           o.id,
           o.scheduled_for,
           CASE WHEN i.outcome <> 'skipped' THEN o.attempt ELSE 0 END,
           i.outcome,
           o.locked_by,
           o.fencing_token,
           CASE WHEN i.outcome <> 'skipped' THEN o.claimed_at END,
           CASE WHEN i.outcome <> 'retrying' THEN clock.now END,
           i.error,
           i.output,
           CASE WHEN i.outcome = 'skipped' THEN i.skips ELSE 1 END,
           CASE WHEN i.outcome = 'skipped' THEN i.skip_to END
    FROM input AS i
    JOIN job ON job.id = i.job_id
    JOIN pgpulse_jobs AS o ON o.id = job.id
    CROSS JOIN clock
    WHERE o.id = ANY(ARRAY(SELECT job_id FROM input))
    ON CONFLICT (job_id, scheduled_for) WHERE kind = 'scheduled' DO UPDATE
    SET attempts = excluded.attempts,
        outcome = excluded.outcome,
        node_id = excluded.node_id,
        fencing_token = excluded.fencing_token,
        started_at = excluded.started_at,
        finished_at = excluded.finished_at,
        error = excluded.error,
        output = excluded.output,
        occurrences = excluded.occurrences,
        last_scheduled_for = excluded.last_scheduled_for
    RETURNING 1
),
skipped AS (
    INSERT INTO pgpulse_runs (
        job_id, scheduled_for, attempts, outcome, error, finished_at, occurrences,
        last_scheduled_for
    )
    SELECT i.job_id, i.skip_from, 0, 'skipped', i.skip_reason, clock.now, i.skips, i.skip_to
    FROM input AS i
    JOIN job ON job.id = i.job_id
    CROSS JOIN clock
    WHERE i.skips > 0
      AND i.outcome <> 'skipped'
    ON CONFLICT (job_id, scheduled_for) WHERE kind = 'scheduled' DO NOTHING
    RETURNING 1
),
due AS (
    SELECT j.id
    FROM pgpulse_jobs AS j
    WHERE j.status = 'idle'
      AND j.next_run_at <= coalesce(%(now)s::timestamptz, now())
      AND j.shard_id = ANY(%(shards)s::smallint[])
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
),
claimed AS (
    UPDATE pgpulse_jobs AS j
    SET status = 'running',
        attempt = j.attempt + 1,
        fencing_token = j.fencing_token + 1,
        locked_by = %(node)s,
        lease_expires_at = clock.now + make_interval(secs => %(lease)s),
        run_id = coalesce(j.run_id, nextval('pgpulse_runs_id_seq')),
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
              clock.now AS db_now, j.overlap, j.max_concurrency
)
SELECT claimed.*,
       clock.now,
       -- the head of pgpulse_jobs_due past now: ORDER BY ... LIMIT 1, not min(), which the
       -- planner may compute by a bitmap scan of every idle row
       (
           SELECT j.next_run_at
           FROM pgpulse_jobs AS j
           WHERE j.status = 'idle'
             AND j.next_run_at > coalesce(%(now)s::timestamptz, now())
             AND j.shard_id = ANY(%(shards)s::smallint[])
             AND (SELECT count(*) FROM claimed) < %(limit)s
           ORDER BY j.next_run_at
           LIMIT 1
       ) AS next_due,
       CASE WHEN row_number() OVER () = 1
            THEN ARRAY(SELECT ARRAY[id, fencing_token] FROM job)
       END AS written,
       -- the head of pgpulse_occurrences_due (due or not): when the node's claim of extra
       -- occurrences (finish_and_claim_occurrences) has something to claim
       (
           SELECT o.next_run_at
           FROM pgpulse_occurrences AS o
           WHERE o.lease_expires_at IS NULL
             AND o.shard_id = ANY(%(shards)s::smallint[])
             AND (SELECT count(*) FROM claimed) < %(limit)s
           ORDER BY o.next_run_at
           LIMIT 1
       ) AS occurrences_due
FROM clock
LEFT JOIN claimed ON true
ORDER BY claimed.scheduled_for;

-- name: renew_leases
-- Heartbeat for running work: extend the lease of each (job id, fencing token) pair this node
-- still holds. Returns the ids renewed; a pair missing from the result has lost its lease.
-- No status test: an unexpired lease means running (CHECK), and the lookup stays on the primary
-- key rather than pgpulse_jobs_leases (every running job).
UPDATE pgpulse_jobs j
SET lease_expires_at = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(lease)s)
FROM unnest(%(job_ids)s::bigint[], %(tokens)s::bigint[]) AS held(id, token)
WHERE j.id = held.id AND j.fencing_token = held.token
  AND j.lease_expires_at > coalesce(%(now)s::timestamptz, now())
RETURNING j.id, j.fencing_token;

-- name: hand_back_runs
-- A stopping node hands back the claims it could not finish, so no one waits for their leases to
-- expire: each job is idle and due at once, %(reason)s its last_error. Fenced per claim. A claim
-- whose handler had started (%(started)s) was an attempt: its run row is written 'retrying' with
-- %(reason)s as its error, as the sweeper writes a lease that expired, so the next claim is the
-- next attempt and the history says why this one ended. A claim whose handler never started is
-- not counted (attempt - 1) and writes no row: the next claim makes the same attempt again.
-- The run row takes the claim's values from the job row as this statement's snapshot shows it,
-- before `job` changed it.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), held AS (
    SELECT *
    FROM unnest(%(job_ids)s::bigint[], %(tokens)s::bigint[], %(started)s::bool[])
         AS h(id, token, started)
), job AS (
    UPDATE pgpulse_jobs j
    SET status = 'idle',
        next_run_at = clock.now,
        attempt = CASE WHEN held.started THEN j.attempt ELSE greatest(j.attempt - 1, 0) END,
        locked_by = NULL,
        lease_expires_at = NULL,
        last_error = %(reason)s,
        updated_at = clock.now
    FROM clock, held
    WHERE j.id = held.id AND j.fencing_token = held.token AND j.lease_expires_at IS NOT NULL
    RETURNING j.id, held.started
), run AS (
    INSERT INTO pgpulse_runs AS r (id, job_id, scheduled_for, attempts, outcome, node_id,
                                   fencing_token, started_at, error)
    OVERRIDING SYSTEM VALUE
    SELECT coalesce(o.run_id, nextval('pgpulse_runs_id_seq')), o.id, o.scheduled_for, o.attempt,
           'retrying', o.locked_by, o.fencing_token, o.claimed_at, %(reason)s
    FROM job JOIN pgpulse_jobs o ON o.id = job.id
    WHERE job.started
    ON CONFLICT (job_id, scheduled_for) WHERE kind = 'scheduled' DO UPDATE
    SET attempts = excluded.attempts, outcome = 'retrying', node_id = excluded.node_id,
        fencing_token = excluded.fencing_token, started_at = excluded.started_at,
        finished_at = NULL, error = excluded.error
    RETURNING 1
)
SELECT job.id, job.started FROM job;

-- name: register_node
-- A node's start (started_at is now, also when a restarted node reuses its id) or, with
-- %(rejoin)s, a running node registering again after its row went stale (started_at kept).
INSERT INTO pgpulse_nodes AS n (node_id, hostname, pid, slots, handlers, state, started_at,
                                last_heartbeat, ttl)
VALUES (%(node)s, %(hostname)s, %(pid)s, %(slots)s, %(handlers)s, 'alive',
        coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()), %(ttl)s)
ON CONFLICT (node_id) DO UPDATE
SET hostname = excluded.hostname, pid = excluded.pid, slots = excluded.slots,
    handlers = excluded.handlers, state = 'alive', last_heartbeat = excluded.last_heartbeat,
    ttl = excluded.ttl,
    started_at = CASE WHEN %(rejoin)s::bool THEN n.started_at ELSE excluded.started_at END;

-- name: revive_jobs
-- A node that knows a handler brings back the jobs that failed because the node that claimed them
-- did not have it (status 'failed' means "cannot be scheduled": a handler that node did not know,
-- or a shell job on a node not allowed to run them).
UPDATE pgpulse_jobs j
SET status = 'idle', next_run_at = now(), last_error = NULL, updated_at = now()
WHERE j.status = 'failed' AND j.handler = ANY(%(handlers)s::text[])
RETURNING j.id, pg_notify('pgpulse_wakeup', j.shard_id::text);

-- name: heartbeat
-- A node's heartbeat, its one statement per heartbeat interval (design.md, "Cluster behaviour"):
-- * leadership: %(leading)s true means this session holds the session-level leader lock
--   %(leader_key)s already (CASE evaluates only the branch it needs: no lock call); false tries
--   to take it (re-entrant; kept by the session even if this statement fails, so a reply lost
--   after the lock was taken is harmless: the next try finds it again); NULL takes no part (a
--   pooled connection must never hold the lock);
-- * lease sweeper: running jobs whose lease expired go back to idle, due at once — for the leader
--   every expired lease, for any other node (backup, in case the leader is silent) those expired
--   more than %(backup_delay)s seconds ago (NULL: none). SKIP LOCKED: sweepers never wait on each
--   other, and reaping twice is harmless. The occurrence's run row is written (or kept) as
--   'retrying' with the lost attempt, so the next claim is the next attempt of the same run; each
--   reaped job's shard is woken. With nothing expired this is one probe of pgpulse_jobs_leases
--   (the bound is an index condition); extra occurrences' expired leases the same way, in
--   pgpulse_occurrences (their run rows 'retrying', their batches' counts released: one probe of
--   pgpulse_occurrences_leases);
-- * liveness: record node %(node)s's heartbeat, load and shards (NULL node: record nothing).
-- Returns one row: the clock reading, whether this session leads, how many leases it reaped, and
-- the nodes alive by the database's clock (heartbeat within %(ttl)s seconds), this one included.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), lead AS (
    SELECT CASE %(leading)s::bool WHEN true THEN true
                                 WHEN false THEN pg_try_advisory_lock(%(leader_key)s)
                                 ELSE false END AS leader
), expired AS (
    SELECT j.id, j.scheduled_for, j.attempt, j.locked_by, j.fencing_token, j.run_id, j.claimed_at
    FROM pgpulse_jobs j
    WHERE j.status = 'running'
      AND j.lease_expires_at < coalesce(%(now)s::timestamptz, now()) - make_interval(
              secs => CASE WHEN (SELECT leader FROM lead) THEN 0
                           ELSE %(backup_delay)s::float8 END)
    ORDER BY j.lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), job AS (
    UPDATE pgpulse_jobs j
    SET status = 'idle', next_run_at = clock.now,
        last_error = 'lease of node ' || coalesce(j.locked_by, '?') || ' expired',
        locked_by = NULL, lease_expires_at = NULL, updated_at = clock.now
    FROM expired, clock
    WHERE j.id = expired.id
    RETURNING j.id, j.last_error, pg_notify('pgpulse_wakeup', j.shard_id::text)
), run AS (
    INSERT INTO pgpulse_runs AS r (id, job_id, scheduled_for, attempts, outcome, node_id,
                               fencing_token, started_at, error)
    OVERRIDING SYSTEM VALUE
    SELECT coalesce(e.run_id, nextval('pgpulse_runs_id_seq')), e.id, e.scheduled_for, e.attempt, 'retrying', e.locked_by, e.fencing_token,
           e.claimed_at, job.last_error
    FROM expired e JOIN job ON job.id = e.id
    ON CONFLICT (job_id, scheduled_for) WHERE kind = 'scheduled' DO UPDATE
    SET attempts = excluded.attempts, outcome = 'retrying', node_id = excluded.node_id,
        fencing_token = excluded.fencing_token, started_at = excluded.started_at,
        finished_at = NULL, error = excluded.error
    RETURNING r.id
), expired_occurrence AS (
    SELECT o.id
    FROM pgpulse_occurrences o
    WHERE o.lease_expires_at IS NOT NULL
      AND o.lease_expires_at < coalesce(%(now)s::timestamptz, now()) - make_interval(
              secs => CASE WHEN (SELECT leader FROM lead) THEN 0
                           ELSE %(backup_delay)s::float8 END)
    ORDER BY o.lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
), occurrence AS (
    UPDATE pgpulse_occurrences o
    SET lease_expires_at = NULL, next_run_at = clock.now
    FROM clock
    WHERE o.id = ANY(ARRAY(SELECT id FROM expired_occurrence))
    RETURNING o.id, o.job_id, o.kind, o.scheduled_for, o.batch_id, o.attempt, o.locked_by,
              o.fencing_token, o.claimed_at, pg_notify('pgpulse_wakeup', o.shard_id::text)
), occurrence_run AS (
    INSERT INTO pgpulse_runs AS r (id, job_id, scheduled_for, attempts, outcome, node_id,
                                   fencing_token, started_at, error, kind, batch_id)
    OVERRIDING SYSTEM VALUE
    SELECT e.id, e.job_id, e.scheduled_for, e.attempt, 'retrying', e.locked_by, e.fencing_token,
           e.claimed_at, 'lease of node ' || coalesce(e.locked_by, '?') || ' expired', e.kind,
           e.batch_id
    FROM occurrence e
    ON CONFLICT (id) DO UPDATE
    SET attempts = excluded.attempts, outcome = 'retrying', node_id = excluded.node_id,
        fencing_token = excluded.fencing_token, started_at = excluded.started_at,
        finished_at = NULL, error = excluded.error
    RETURNING 1
), occurrence_counted AS (
    UPDATE pgpulse_batches b
    SET running = b.running - d.n
    FROM (SELECT batch_id, count(*)::int AS n FROM occurrence GROUP BY batch_id) d
    WHERE b.id = d.batch_id
    RETURNING 1
), me AS (
    UPDATE pgpulse_nodes n
    SET last_heartbeat = clock.now, running = %(running)s, shards = %(shards)s::smallint[],
        state = %(state)s
    FROM clock
    WHERE n.node_id = %(node)s
    RETURNING n.node_id, n.state
)
SELECT clock.now AS db_now, lead.leader,
       ((SELECT count(*) FROM job) + (SELECT count(*) FROM occurrence))::int AS reaped,
       ARRAY(SELECT n.node_id
             FROM pgpulse_nodes n
             WHERE n.node_id <> %(node)s AND n.state = 'alive'
               AND n.last_heartbeat > clock.now - make_interval(secs => %(ttl)s)
             UNION ALL
             SELECT me.node_id FROM me WHERE me.state = 'alive') AS live
FROM clock, lead;

-- name: stop_node
UPDATE pgpulse_nodes
SET state = 'stopped', running = 0, shards = '{}', last_heartbeat = coalesce(%(now)s::timestamptz, now())
WHERE node_id = %(node)s;

-- name: prune
-- Housekeeping (leader only): forget finished runs older than %(keep)s seconds, nodes that
-- have been silent for a day, and trigger and backfill batches as old whose occurrences have
-- all run (a job's overlap batch stays with it).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), runs AS (
    DELETE FROM pgpulse_runs r
    USING clock
    WHERE r.finished_at < clock.now - make_interval(secs => %(keep)s)
    RETURNING 1
), batches AS (
    DELETE FROM pgpulse_batches b
    USING clock
    WHERE b.kind <> 'overlap'
      AND b.created_at < clock.now - make_interval(secs => %(keep)s)
      AND NOT EXISTS (SELECT 1 FROM pgpulse_occurrences o WHERE o.batch_id = b.id)
    RETURNING 1
), nodes AS (
    DELETE FROM pgpulse_nodes n
    USING clock
    WHERE n.last_heartbeat < clock.now - interval '1 day'
    RETURNING 1
)
SELECT (SELECT count(*) FROM runs) AS runs, (SELECT count(*) FROM nodes) AS nodes;

-- name: upsert_job
-- Create or update job (tenant, name). A new job, or one whose schedule or time zone changed,
-- gets %(scheduled_for)s as its next occurrence (planner.first_occurrence after the database's
-- now, read in the same transaction); an unchanged schedule keeps the job's state, so
-- re-importing is a no-op.
-- The job is found by its name in pgpulse_job_names: updated if there, inserted if not. Two
-- sessions creating one new name at once: the second's insert of the name waits for the first
-- and fails with unique_violation (pgpulse_job_names_pkey), rolling its statement back; so does
-- a job deleted between the lookup and the update (no row returned). The caller retries: the
-- next try finds the name (Store.upsert_jobs).
WITH found AS (
    SELECT n.job_id FROM pgpulse_job_names n WHERE n.tenant = %(tenant)s AND n.name = %(name)s
), updated AS (
    UPDATE pgpulse_jobs j
    SET schedule = %(schedule)s, schedule_kind = %(schedule_kind)s, timezone = %(timezone)s,
        handler = %(handler)s, payload = %(payload)s, catch_up = %(catch_up)s,
        backfill_limit = %(backfill_limit)s,
        misfire_grace = make_interval(secs => %(misfire_grace)s),
        max_attempts = %(max_attempts)s,
        retry_backoff = make_interval(secs => %(retry_backoff)s),
        timeout = make_interval(secs => %(timeout)s), source = %(source)s, meta = %(meta)s,
        overlap = %(overlap)s, max_concurrency = %(max_concurrency)s,
        anchor_at = CASE WHEN (j.schedule, j.timezone) = (%(schedule)s, %(timezone)s)
                         THEN j.anchor_at ELSE %(anchor_at)s END,
        scheduled_for = CASE WHEN (j.schedule, j.timezone) = (%(schedule)s, %(timezone)s)
                               OR j.status = 'running'
                             THEN j.scheduled_for ELSE %(scheduled_for)s END,
        next_run_at = CASE WHEN (j.schedule, j.timezone) = (%(schedule)s, %(timezone)s)
                             OR j.status = 'running'
                           THEN j.next_run_at ELSE %(scheduled_for)s END,
        attempt = CASE WHEN (j.schedule, j.timezone) = (%(schedule)s, %(timezone)s)
                         OR j.status = 'running'
                       THEN j.attempt ELSE 0 END,
        run_id = CASE WHEN (j.schedule, j.timezone) = (%(schedule)s, %(timezone)s)
                        OR j.status = 'running'
                      THEN j.run_id END,
        updated_at = now()
    FROM found
    WHERE j.id = found.job_id
    RETURNING j.id, j.shard_id, false AS created
), inserted AS (
    INSERT INTO pgpulse_jobs (tenant, name, schedule, schedule_kind, timezone, handler, payload,
                                catch_up, backfill_limit, misfire_grace, max_attempts,
                                retry_backoff, timeout, source, meta, overlap,
                                max_concurrency, anchor_at, scheduled_for, next_run_at)
    SELECT %(tenant)s::text, %(name)s::text, %(schedule)s::text, %(schedule_kind)s::text,
           %(timezone)s::text, %(handler)s::text, %(payload)s::jsonb, %(catch_up)s::text,
           %(backfill_limit)s::integer, make_interval(secs => %(misfire_grace)s),
           %(max_attempts)s::integer, make_interval(secs => %(retry_backoff)s),
           make_interval(secs => %(timeout)s), %(source)s::text, %(meta)s::jsonb,
           %(overlap)s::text, %(max_concurrency)s::integer, %(anchor_at)s::timestamptz,
           %(scheduled_for)s::timestamptz, %(scheduled_for)s::timestamptz
    WHERE NOT EXISTS (SELECT 1 FROM found)
    RETURNING id, shard_id, true AS created
)
SELECT w.id, w.shard_id, w.created, pg_notify('pgpulse_wakeup', w.shard_id::text)
FROM (SELECT * FROM updated UNION ALL SELECT * FROM inserted) w;

-- name: lock_jobs_by_name
-- The handler of each existing job among the names (%(tenants)s[i], %(names)s[i]), its row
-- locked until the end of the transaction: an upsert checks who may write each definition
-- against the job it replaces (pgpulse.access), and nothing changes that job in between. Rows
-- are locked in id order, as every statement over several job rows takes them.
SELECT n.tenant, n.name, j.handler
FROM unnest(%(tenants)s::text[], %(names)s::text[]) AS w(tenant, name)
JOIN pgpulse_job_names n ON n.tenant = w.tenant AND n.name = w.name
JOIN pgpulse_jobs j ON j.id = n.job_id
ORDER BY j.id
FOR UPDATE OF j;

-- name: now
SELECT now() AS db_now;

-- name: get_job
SELECT j.*, extract(epoch FROM j.misfire_grace)::float8 AS misfire_grace_s,
       extract(epoch FROM j.retry_backoff)::float8 AS retry_backoff_s,
       extract(epoch FROM j.timeout)::float8 AS timeout_s
FROM pgpulse_jobs j
WHERE j.id = (SELECT n.job_id FROM pgpulse_job_names n WHERE n.tenant = %(tenant)s AND n.name = %(name)s);

-- name: list_jobs
SELECT j.id, j.tenant, j.name, j.schedule, j.timezone, j.handler, j.catch_up, j.status,
       j.scheduled_for, j.next_run_at, j.attempt, j.locked_by, j.last_outcome, j.last_error,
       j.last_finished_at
FROM pgpulse_job_names n JOIN pgpulse_jobs j ON j.id = n.job_id
WHERE (%(tenant)s::text IS NULL OR n.tenant = %(tenant)s)
ORDER BY n.tenant, n.name;

-- name: set_paused
-- Pause (from idle or failed) or resume (from paused or failed, holding %(scheduled_for)s, the
-- next occurrence after now). A running job cannot change state here: the caller says so.
UPDATE pgpulse_jobs j
SET status = %(status)s,
    scheduled_for = coalesce(%(scheduled_for)s, j.scheduled_for),
    next_run_at = coalesce(%(scheduled_for)s, j.next_run_at),
    attempt = CASE WHEN %(scheduled_for)s::timestamptz IS NULL THEN j.attempt ELSE 0 END,
    run_id = CASE WHEN %(scheduled_for)s::timestamptz IS NULL THEN j.run_id END,
    last_error = CASE WHEN %(status)s = 'idle' THEN NULL ELSE j.last_error END,
    updated_at = now()
WHERE j.id = (SELECT n.job_id FROM pgpulse_job_names n WHERE n.tenant = %(tenant)s AND n.name = %(name)s)
  AND j.status = ANY(%(from_status)s::text[])
RETURNING j.id, j.status, pg_notify('pgpulse_wakeup', j.shard_id::text);

-- name: trigger_job
-- Trigger now: an idle job whose next occurrence is in the future gets an extra occurrence at the
-- database's now; afterwards the schedule continues from that instant, which reaches the same
-- next occurrence. A job that is already due is left as it is (it runs now anyway).
UPDATE pgpulse_jobs j
SET scheduled_for = CASE WHEN j.scheduled_for > now() THEN now() ELSE j.scheduled_for END,
    run_id = CASE WHEN j.scheduled_for > now() THEN NULL ELSE j.run_id END,
    next_run_at = now(),
    updated_at = now()
WHERE j.id = (SELECT n.job_id FROM pgpulse_job_names n WHERE n.tenant = %(tenant)s AND n.name = %(name)s)
  AND j.status = 'idle'
RETURNING j.id, j.scheduled_for, pg_notify('pgpulse_wakeup', j.shard_id::text);

-- name: job_status
SELECT j.status FROM pgpulse_jobs j
WHERE j.id = (SELECT n.job_id FROM pgpulse_job_names n WHERE n.tenant = %(tenant)s AND n.name = %(name)s);

-- name: delete_job
DELETE FROM pgpulse_jobs j
WHERE j.id = (SELECT n.job_id FROM pgpulse_job_names n WHERE n.tenant = %(tenant)s AND n.name = %(name)s)
RETURNING j.id;

-- name: list_runs
-- Runs newest first, those running now included (pgpulse_runs_live). A skipped summary row stands
-- for its occurrences from scheduled_for through last_scheduled_for.
SELECT r.id, j.tenant, j.name, r.scheduled_for, r.attempts, r.outcome, r.occurrences,
       coalesce(r.last_scheduled_for, r.scheduled_for) AS last_scheduled_for, r.node_id,
       r.started_at,
       r.finished_at, extract(epoch FROM r.finished_at - r.started_at)::float8 AS duration,
       r.error, r.output, r.fencing_token, r.kind
FROM pgpulse_runs_live r JOIN pgpulse_jobs j ON j.id = r.job_id
WHERE (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s)
  AND (%(name)s::text IS NULL
       OR r.job_id IN (SELECT n.job_id FROM pgpulse_job_names n
                       WHERE n.name = %(name)s
                         AND (%(tenant)s::text IS NULL OR n.tenant = %(tenant)s)))
ORDER BY r.id DESC
LIMIT %(limit)s;

-- name: cluster_nodes
-- Every registered node, judged by the time-to-live it registered with (%(ttl)s for a node that
-- recorded none), as its peers judge it: 'lost' when its heartbeat is older than that although
-- it never said it stopped (killed, partitioned, paused). A lost or stopped node owns no shards
-- and runs nothing; its last shards and load stay in the row, not in what is shown.
SELECT n.node_id, n.hostname, n.pid,
       CASE WHEN h.fresh OR n.state = 'stopped' THEN n.state ELSE 'lost' END AS state,
       n.started_at, n.last_heartbeat, h.fresh AND n.state = 'alive' AS alive,
       CASE WHEN h.fresh AND n.state <> 'stopped' THEN n.shards ELSE '{}' END AS shards,
       CASE WHEN h.fresh AND n.state <> 'stopped' THEN n.running ELSE 0 END AS running,
       n.slots, coalesce(n.ttl, %(ttl)s) AS ttl,
       -- A node holds the leader lock on its heartbeat session ('pgpulse:<id>:beat'). Names are
       -- cut to 63 characters, as PostgreSQL stores them.
       (SELECT a.application_name = left('pgpulse:' || n.node_id || ':beat', 63)
        FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND l.classid::bigint = 0
          AND l.objid::bigint = %(leader_key)s AND l.granted
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
        LIMIT 1) AS leader
FROM pgpulse_nodes n
CROSS JOIN LATERAL (
    SELECT n.last_heartbeat > now() - make_interval(secs => coalesce(n.ttl, %(ttl)s)) AS fresh
) h
ORDER BY n.node_id;

-- name: cluster_counts
-- Jobs by state, of one tenant or all, and how late the most overdue idle job is (seconds).
SELECT count(*) FILTER (WHERE status = 'idle' AND next_run_at <= now()) AS due,
       count(*) FILTER (WHERE status = 'running') AS running,
       count(*) FILTER (WHERE status = 'paused') AS paused,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) AS total,
       extract(epoch FROM now() - min(next_run_at) FILTER (WHERE status = 'idle'
                                                           AND next_run_at <= now()))::float8
           AS max_lag
FROM pgpulse_jobs
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s);

-- name: known_handlers
SELECT DISTINCT unnest(handlers) AS handler FROM pgpulse_nodes;
