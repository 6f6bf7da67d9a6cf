-- Every statement Pulse sends, as named blocks ("-- name: NAME"), loaded once by pgpulse.sql.
-- Clock rule (docs/design.md, invariant 1): instants come from the database's now(). Tests may pass
-- a fixed instant as %(now)s; production code always passes NULL. {shard_of_job} and
-- {shard_of_occurrence} mark where a claim names a row's shard (pgpulse.sql.at_shard_count).

-- A node's claim step is these statements, sent in one pipeline (one round trip, one
-- transaction: claims.ClaimStore.finish_and_claim): record_skips_and_auto_pauses when an
-- outcome needs it, finish_jobs, claim_jobs and next_job_due. Epochs (docs/design.md, invariant 9):
-- a failover with asynchronous replication can lose the last commits, and the new primary runs
-- on a new timeline (the first 8 hex digits of the WAL file it writes), so tokens and run ids
-- carry it: clock.epoch is (timeline - 1) * 2^48; a token is greatest(token, epoch) + 1 and a
-- run id the sequence's value + the epoch, never what an older timeline handed out (limits:
-- 2^48 claims of one job per timeline, 2^48 run ids, 32768 timelines). The claim session plans
-- them once, generically (claims.CLAIM_SESSION_SETTINGS): every access is written to stay an
-- index lookup (rows by id = ANY(ARRAY(...)) on the primary key; "running" as
-- lease_expires_at IS NOT NULL, the tables' CHECK; due bounds inline, index conditions).

-- name: record_skips_and_auto_pauses
-- The rare records of a batch of outcomes (%(outcomes)s, as finish_jobs reads them), written
-- before finish_jobs in its transaction: one summary run row for the occurrences an element
-- skips ("skips" from skip_from through skip_to, NULL for one; its own occurrence's row is the
-- summary when its outcome is 'skipped'), and the audit row of an element that pauses its job
-- (auto_pause_after, as a pause by its node). Fenced as finish_jobs is, and it locks every
-- element's job row in id order first, so finish_jobs, next, finds the same rows held.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now,
           {epoch} AS epoch
), input AS (
    SELECT * FROM json_to_recordset(%(outcomes)s::json) AS i (
        job_id bigint, token bigint, status text, outcome text, skips bigint,
        skip_from timestamptz, skip_to timestamptz, skip_reason text, pause_reason text,
        node text)
), held AS (
    SELECT i.*, j.tenant, j.name, j.revision, j.pause_reason AS old_reason
    FROM (SELECT j.* FROM pgpulse_jobs AS j WHERE j.id = ANY(ARRAY(SELECT job_id FROM input))
          ORDER BY j.id FOR NO KEY UPDATE) AS j
    JOIN input AS i ON i.job_id = j.id
    WHERE j.fencing_token = i.token AND j.lease_expires_at IS NOT NULL
), skipped AS (
    INSERT INTO pgpulse_runs (id, job_id, scheduled_for, attempts, outcome, error, finished_at,
                              occurrences, last_scheduled_for)
    OVERRIDING SYSTEM VALUE
    SELECT nextval('pgpulse_runs_id_seq') + clock.epoch, h.job_id, h.skip_from, 0, 'skipped',
           h.skip_reason, clock.now, h.skips, h.skip_to
    FROM held AS h CROSS JOIN clock
    WHERE h.skips > 0 AND h.outcome <> 'skipped'
    ON CONFLICT (job_id, scheduled_for) WHERE kind = 'scheduled' DO NOTHING
    RETURNING 1
), paused AS (
    INSERT INTO pgpulse_job_history (job_id, tenant, name, at, action, source, actor, revision,
                                     changes)
    SELECT h.job_id, h.tenant, h.name, clock.now, 'pause', 'node', 'node:' || h.node,
           h.revision,
           jsonb_build_object('pause_reason', jsonb_build_array(h.old_reason, h.pause_reason))
    FROM held AS h CROSS JOIN clock
    WHERE h.status = 'paused'
    RETURNING 1
)
SELECT (SELECT count(*) FROM skipped) AS skipped, (SELECT count(*) FROM paused) AS paused;

-- name: finish_jobs
-- End a batch of attempts of job rows (%(outcomes)s, one JSON object per attempt:
-- ClaimStore.finish_and_claim), fenced: an element changes nothing unless its job still runs
-- under its token, so the late write of a node that lost its lease is a no-op. Per element the
-- job row moves to its next state (next_run_at NULL: retry_in seconds from now; reset_attempt:
-- a new occurrence, so attempt, interruptions and run_id start over) and the occurrence's run
-- row takes the attempt, inserted or written over an earlier attempt's, which it first appends
-- to earlier_attempts; a 'retrying' end is recorded in attempt_ended_at. The run row's claim
-- values come from the element and from the fenced update (token, claimed_at): nothing changes
-- them while a claim holds its token. Locks the job rows it ends. Returns the (id,
-- fencing_token) of each element written.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), input AS (
    SELECT * FROM json_to_recordset(%(outcomes)s::json) AS i (
        job_id bigint, token bigint, status text, scheduled_for timestamptz,
        next_run_at timestamptz, retry_in float8, reset_attempt bool, outcome text,
        error text, output text, skips bigint, skip_to timestamptz, counts_run bool,
        failures int, pause_reason text, run_id bigint, run_scheduled_for timestamptz,
        attempt int, node text)
), job AS (
    UPDATE pgpulse_jobs AS j
    -- a pause requested while the job ran (pause_job) takes effect when the run ends, not at a
    -- retry, which is part of the run
    SET status = CASE WHEN j.pause_requested AND i.reset_attempt AND i.status = 'idle'
                      THEN 'paused' ELSE i.status END,
        pause_requested = j.pause_requested AND NOT i.reset_attempt AND i.status = 'idle',
        scheduled_for = i.scheduled_for,
        next_run_at = coalesce(i.next_run_at, clock.now + make_interval(secs => i.retry_in)),
        attempt = CASE WHEN i.reset_attempt THEN 0 ELSE j.attempt END,
        interruptions = CASE WHEN i.reset_attempt THEN 0 ELSE j.interruptions END,
        run_id = CASE WHEN i.reset_attempt THEN NULL ELSE j.run_id END,
        locked_by = NULL, lease_expires_at = NULL, last_outcome = i.outcome,
        last_error = i.error, last_finished_at = clock.now,
        last_success_at = CASE WHEN i.outcome = 'succeeded' THEN clock.now
                               ELSE j.last_success_at END,
        last_success_scheduled_for = CASE WHEN i.outcome = 'succeeded' THEN i.run_scheduled_for
                                          ELSE j.last_success_scheduled_for END,
        runs_done = j.runs_done + CASE WHEN i.counts_run THEN 1 ELSE 0 END,
        failures = coalesce(i.failures, j.failures),
        pause_reason = CASE WHEN i.status = 'paused' THEN i.pause_reason ELSE j.pause_reason END,
        updated_at = clock.now
    FROM input AS i, clock
    WHERE j.id = ANY(ARRAY(SELECT job_id FROM input)) AND j.id = i.job_id
      AND j.fencing_token = i.token AND j.lease_expires_at IS NOT NULL
    RETURNING j.id, j.fencing_token, j.claimed_at
), run AS (
    INSERT INTO pgpulse_runs AS r (
        id, job_id, scheduled_for, attempts, outcome, node_id, fencing_token, started_at,
        finished_at, error, output, occurrences, last_scheduled_for, attempt_ended_at)
    OVERRIDING SYSTEM VALUE
    SELECT i.run_id, job.id, i.run_scheduled_for,
           CASE WHEN i.outcome <> 'skipped' THEN i.attempt ELSE 0 END, i.outcome, i.node,
           job.fencing_token, CASE WHEN i.outcome <> 'skipped' THEN job.claimed_at END,
           CASE WHEN i.outcome <> 'retrying' THEN clock.now END, i.error, i.output,
           CASE WHEN i.outcome = 'skipped' THEN i.skips ELSE 1 END,
           CASE WHEN i.outcome = 'skipped' THEN i.skip_to END,
           CASE WHEN i.outcome = 'retrying' THEN clock.now END
    FROM input AS i JOIN job ON job.id = i.job_id CROSS JOIN clock
    ON CONFLICT (job_id, scheduled_for) WHERE kind = 'scheduled' DO UPDATE
    {attempt_written_over}
    RETURNING 1
)
SELECT id, fencing_token FROM job;

-- name: claim_jobs
-- Claim up to %(limit)s due idle jobs for node %(node)s along its routes: the i-th handler of
-- %(route_handlers)s in the shards of the i-th array literal of %(route_shards)s
-- (sharding.routes_for). Each route is one scan of pgpulse_jobs_due (handler, next_run_at,
-- shard), stopping at its first row not yet due, LIMIT %(limit)s, rows locked SKIP LOCKED as it
-- reads them (pollers never wait on each other; a job whose handler is on no route is never
-- read), and one of pgpulse_jobs_due_priority (the jobs with a priority above 0, highest first:
-- empty when no job has one); of those, %(limit)s are claimed in claim order: highest priority
-- first, then oldest due, except that an occurrence due for more than 60 seconds (keys.py's
-- STARVATION_BOUND)
-- goes before every one that is not, oldest first (the starvation bound, docs/policies.md). The
-- two scans hold the true first %(limit)s in that order: the priority scan holds every one with
-- a priority, the due scan the oldest of the rest and every starved one. Rows locked beyond
-- them stay locked, unclaimed, until the commit: the price of one scan-and-lock step. A job
-- under overlap allow is not claimed while it has max_concurrency forked occurrences (its
-- backlog stays on the job row, docs/states.md), nor one whose concurrency key is at its limit
-- ({key_open}, {key_room}, {key_allows}: exact across nodes). Each claimed job runs with
-- attempt + 1, a lease of %(lease)s seconds and a new fencing token, and keeps (a retry, a
-- re-claim) or draws its run id. Returns one row per claimed job (ClaimedJob's fields by name),
-- oldest occurrence first; the node computes the spread offset (a SQL function per row cost
-- 1.14-1.31x the DB CPU per firing).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now,
           {epoch} AS epoch
), route AS (
    SELECT r.handler, r.shards::smallint[] AS shards
    FROM unnest(%(route_handlers)s::text[], %(route_shards)s::text[]) AS r (handler, shards)
), due AS (
    SELECT c.*
    FROM route r
    CROSS JOIN LATERAL (
        SELECT j.id, j.tenant, j.concurrency_key, j.priority, j.next_run_at
        FROM pgpulse_jobs j
        WHERE j.status = 'idle' AND j.handler = r.handler
          AND j.next_run_at <= coalesce(%(now)s::timestamptz, now())
          AND {shard_of_job} = ANY(r.shards) AND {job_open}
        ORDER BY j.next_run_at
        LIMIT %(limit)s
        FOR UPDATE OF j SKIP LOCKED
    ) c
), ahead AS (
    SELECT c.*
    FROM route r
    CROSS JOIN LATERAL (
        SELECT j.id, j.tenant, j.concurrency_key, j.priority, j.next_run_at
        FROM pgpulse_jobs j
        WHERE j.status = 'idle' AND j.priority > 0 AND j.handler = r.handler
          AND j.next_run_at <= coalesce(%(now)s::timestamptz, now())
          AND {shard_of_job} = ANY(r.shards) AND {job_open}
        ORDER BY j.priority DESC, j.next_run_at
        LIMIT %(limit)s
        FOR UPDATE OF j SKIP LOCKED
    ) c
), cand AS (
    -- rank: the priority, or above every priority (1000 at most) once starved
    SELECT u.*, CASE WHEN u.next_run_at <= clock.now - interval '60 seconds'
                     THEN 1001 ELSE u.priority END AS rank
    FROM (SELECT * FROM due
          UNION ALL
          SELECT * FROM ahead WHERE ahead.id <> ALL(ARRAY(SELECT id FROM due))) u, clock
), {key_room}, picked AS (
    SELECT c.id, c.tenant, c.concurrency_key
    FROM cand c
    WHERE {key_allows}
    ORDER BY c.rank DESC, c.next_run_at
    LIMIT %(limit)s
), {key_bump}
UPDATE pgpulse_jobs j
SET status = 'running', attempt = j.attempt + 1,
    fencing_token = greatest(j.fencing_token, clock.epoch) + 1, locked_by = %(node)s,
    lease_expires_at = clock.now + make_interval(secs => %(lease)s),
    run_id = coalesce(j.run_id, nextval('pgpulse_runs_id_seq') + clock.epoch),
    claimed_at = clock.now, updated_at = clock.now
FROM clock
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING j.id, j.tenant, j.name, j.schedule, j.timezone, j.handler, j.payload, j.catch_up,
          j.backfill_limit, j.misfire_grace, j.max_attempts, j.retry_backoff, j.timeout,
          j.anchor_at, j.scheduled_for,
          j.attempt, j.fencing_token, j.run_id, clock.now AS db_now, j.spread, j.not_after,
          j.max_runs - j.runs_done AS runs_left,
          CASE WHEN cardinality(j.calendars) > 0 THEN (
              SELECT jsonb_agg(jsonb_build_object('name', c.name, 'dates', c.dates,
                                                  'country', c.country,
                                                  'subdivision', c.subdivision))
              FROM pgpulse_calendars c
              WHERE c.tenant = j.tenant AND c.name = ANY(j.calendars)
          ) END AS calendars,
          j.resume_mode, j.resumed_at, j.auto_pause_after, j.failures, j.overlap,
          j.max_concurrency, j.interruptions, j.skips, j.has_downstreams AS downstreams,
          j.last_success_at, j.last_success_scheduled_for;

-- name: next_job_due
-- The clock; the earliest future due instant of an idle job along the routes of
-- %(route_handlers)s / %(route_shards)s (NULL if none: how long an idle node may sleep); and
-- the earliest due instant of a pending extra occurrence along them, due already or not (when
-- the claim of extra occurrences has work). Per route one probe of the head of
-- pgpulse_jobs_due past now (ORDER BY ... LIMIT 1, not min(), which a planner may compute by
-- a bitmap scan of every idle row), and one of pgpulse_occurrences_due. Locks nothing.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), route AS (
    SELECT r.handler, r.shards::smallint[] AS shards
    FROM unnest(%(route_handlers)s::text[], %(route_shards)s::text[]) AS r (handler, shards)
)
SELECT clock.now AS clock_now, (
    SELECT min(f.next_run_at)
    FROM route AS r
    CROSS JOIN LATERAL (
        SELECT j.next_run_at
        FROM pgpulse_jobs AS j
        WHERE j.status = 'idle' AND j.handler = r.handler
          AND j.next_run_at > coalesce(%(now)s::timestamptz, now())
          AND {shard_of_job} = ANY(r.shards)
        ORDER BY j.next_run_at
        LIMIT 1
    ) AS f
) AS next_due, (
    SELECT o.next_run_at
    FROM pgpulse_occurrences AS o
    JOIN pgpulse_jobs AS j ON j.id = o.job_id
    JOIN route AS r ON r.handler = j.handler AND {shard_of_occurrence} = ANY(r.shards)
    WHERE o.lease_expires_at IS NULL
    ORDER BY o.next_run_at
    LIMIT 1
) AS occurrences_due
FROM clock;

-- name: renew
-- The heartbeat of running work: extend by %(lease)s seconds the lease of each claim this node
-- still holds, of job rows (%(job_ids)s, %(job_tokens)s) and of extra occurrences
-- (%(occurrence_ids)s, %(occurrence_tokens)s). Fenced (docs/design.md, invariant 3): a claim whose
-- token is stale or whose lease is gone (reaped, handed back, replaced, its row deleted) is not
-- renewed, and its holder cancels the attempt. Locks the rows it renews; the caller sends each
-- array in id order, as every statement over running rows does (no lock-order deadlock). An
-- unexpired lease means running (the tables' CHECKs), so no status is tested and each lookup
-- stays on the primary key. Returns the claims renewed.
WITH jobs AS (
    UPDATE pgpulse_jobs AS j
    SET lease_expires_at = coalesce(%(now)s::timestamptz, now())
                           + make_interval(secs => %(lease)s)
    FROM unnest(%(job_ids)s::bigint[], %(job_tokens)s::bigint[]) AS held (id, token)
    WHERE j.id = held.id
      AND j.fencing_token = held.token
      AND j.lease_expires_at > coalesce(%(now)s::timestamptz, now())
    RETURNING 'job' AS row, j.id, j.fencing_token
), occurrences AS (
    UPDATE pgpulse_occurrences AS o
    SET lease_expires_at = coalesce(%(now)s::timestamptz, now())
                           + make_interval(secs => %(lease)s)
    FROM unnest(%(occurrence_ids)s::bigint[], %(occurrence_tokens)s::bigint[]) AS held (id, token)
    WHERE o.id = held.id
      AND o.fencing_token = held.token
      AND o.lease_expires_at > coalesce(%(now)s::timestamptz, now())
    RETURNING 'occurrence' AS row, o.id, o.fencing_token
)
SELECT * FROM jobs
UNION ALL
SELECT * FROM occurrences;

-- name: hand_back_jobs
-- A stopping node hands back the claims it could not finish, so no one waits for their leases to
-- expire: each job is idle and due at once, %(reason)s its last_error. Fenced per claim. A claim
-- whose handler had started (%(started)s) was an attempt: its run row is written 'retrying' with
-- %(reason)s as its error, as the sweeper writes a lease that expired, so the next claim is the
-- next attempt and the history says why this one ended; it is an interruption, not a failure
-- (interruptions + 1: max_attempts bounds the handler's failures, planner.plan_claim). A claim
-- whose handler never started is not counted (attempt - 1) and writes no row: the next claim
-- makes the same attempt again.
-- The run row takes the claim's values from the job row as this statement's snapshot shows it,
-- before `job` changed it.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), held AS (
    SELECT *
    FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(started)s::bool[])
         AS h(id, token, started)
), job AS (
    UPDATE pgpulse_jobs j
    SET status = 'idle',
        next_run_at = clock.now,
        attempt = CASE WHEN held.started THEN j.attempt ELSE greatest(j.attempt - 1, 0) END,
        interruptions = j.interruptions + CASE WHEN held.started THEN 1 ELSE 0 END,
        locked_by = NULL,
        lease_expires_at = NULL,
        last_error = %(reason)s,
        updated_at = clock.now
    FROM clock, held
    WHERE j.id = held.id AND j.fencing_token = held.token AND j.lease_expires_at IS NOT NULL
    RETURNING j.id, held.started
), run AS (
    INSERT INTO pgpulse_runs AS r (id, job_id, scheduled_for, attempts, outcome, node_id,
                                   fencing_token, started_at, error, attempt_ended_at)
    OVERRIDING SYSTEM VALUE
    -- never NULL for a claimed job; else an id as the claim draws one (its epoch)
    SELECT coalesce(o.run_id, nextval('pgpulse_runs_id_seq') + {epoch}),
           o.id, o.scheduled_for, o.attempt,
           'retrying', o.locked_by, o.fencing_token, o.claimed_at, %(reason)s, clock.now
    FROM job JOIN pgpulse_jobs o ON o.id = job.id CROSS JOIN clock
    WHERE job.started
    ON CONFLICT (job_id, scheduled_for) WHERE kind = 'scheduled' DO UPDATE
    {attempt_written_over}
    RETURNING 1
)
SELECT job.id, job.started FROM job;

-- name: register_node
-- A node's start (started_at is now, also when a restarted node reuses its id) or, with
-- %(rejoin)s, a running node registering again after its row went missing (started_at kept).
-- One node id, one process: an existing row is taken over only if it is this process's
-- own (same host and pid), stopped, stale (no heartbeat within its time-to-live; %(ttl)s, or
-- NodeConfig's default of 10 s, for a row that recorded none), or its holder's heartbeat session
-- ('pgpulse:<id>:beat', the one this statement is sent on excepted) is gone from the server: a
-- process killed with SIGKILL takes its connections with it, so a supervisor's immediate restart
-- under the same id is not refused, while a live holder (even one partitioned away, whose
-- connection the server still holds) is. Otherwise nothing changes and no row is returned: a
-- live node holds the id (register_holder says which).
INSERT INTO pgpulse_nodes AS n (node_id, hostname, pid, slots, handlers, shell, state,
                                started_at, last_heartbeat, ttl)
VALUES (%(node)s, %(hostname)s, %(pid)s, %(slots)s, %(handlers)s, %(shell)s, 'alive',
        coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()), %(ttl)s)
ON CONFLICT (node_id) DO UPDATE
SET hostname = excluded.hostname, pid = excluded.pid, slots = excluded.slots,
    handlers = excluded.handlers, shell = excluded.shell, state = 'alive',
    last_heartbeat = excluded.last_heartbeat, ttl = excluded.ttl,
    started_at = CASE WHEN %(rejoin)s::bool THEN n.started_at ELSE excluded.started_at END
WHERE (n.hostname, n.pid) = (excluded.hostname, excluded.pid)
   OR n.state = 'stopped'
   OR n.last_heartbeat <= excluded.last_heartbeat
                          - make_interval(secs => coalesce(n.ttl, %(ttl)s::float8, 10))
   OR NOT EXISTS (
          SELECT 1
          FROM pg_stat_activity AS a
          WHERE a.datname = current_database()
            AND a.application_name = left('pgpulse:' || n.node_id || ':beat', 63)
            AND a.pid <> pg_backend_pid()
      )
RETURNING n.node_id;

-- name: register_holder
-- The live process that holds node id %(node)s (register_node refused to take it over): its host,
-- pid and how long ago (seconds) it sent its last heartbeat.
SELECT n.hostname, n.pid, n.state,
       extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - n.last_heartbeat)::float8
           AS silent
FROM pgpulse_nodes n
WHERE n.node_id = %(node)s;

-- name: revive_jobs
-- A node that knows a handler brings back the jobs that failed because the node that claimed them
-- did not have it (status 'failed' means "cannot be scheduled": a handler that node did not know,
-- or a shell job on a node not allowed to run them).
UPDATE pgpulse_jobs j
SET status = 'idle', next_run_at = now(), last_error = NULL, updated_at = now()
WHERE j.status = 'failed' AND j.handler = ANY(%(handlers)s::text[])
RETURNING j.id, pg_notify('pgpulse_wakeup', j.id::text);

-- name: heartbeat
-- A node's liveness and leadership, sent by every node every heartbeat interval; the sweep
-- (reap_job_leases, reap_occurrence_leases, end_pauses) follows it in the same pipeline.
-- Leadership: %(leading)s true says this session holds the session-level leader lock
-- %(leader_key)s (no lock call); false tries to take it (re-entrant, and kept by the session
-- even if the transaction fails: a reply lost after it is harmless); NULL takes no part (a
-- pooled connection must never hold it).
-- Locks: node %(node)s's row (NULL node: none), updated with its heartbeat, load, shards and
-- claims' health. Fences: only a row still this process's (%(hostname)s, %(pid)s; NULL pid:
-- any); a row another process took over is left alone, and this node is then not in `live`.
-- Returns the clock, leadership, the database's shard count, and the digest of the live set
-- (heartbeat within %(ttl)s s, with its handlers): the set only when not the %(known)s one.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), lead AS (
    SELECT CASE %(leading)s::bool WHEN true THEN true
                                 WHEN false THEN pg_try_advisory_lock(%(leader_key)s)
                                 ELSE false END AS leader
), me AS (
    UPDATE pgpulse_nodes n
    SET last_heartbeat = clock.now, running = %(running)s, shards = %(shards)s::smallint[],
        shard_count = %(shard_count)s, state = %(state)s,
        last_claim_at = greatest(n.last_claim_at, %(claimed_at)s::timestamptz),
        claim_error = %(claim_error)s::text
    FROM clock
    WHERE n.node_id = %(node)s
      AND (%(pid)s::int IS NULL OR (n.hostname, n.pid) = (%(hostname)s::text, %(pid)s::int))
    RETURNING n.node_id, n.state, n.handlers
)
SELECT clock.now AS db_now, lead.leader,
       (SELECT c.shard_count FROM pgpulse_cluster c) AS shard_count,
       members.digest,
       CASE WHEN members.digest IS DISTINCT FROM %(known)s THEN members.live END AS live
FROM clock, lead,
     -- the live nodes and the handlers each advertises, as {"node": [handler, ...]}
     LATERAL (
         SELECT l.live, md5(l.live::text) AS digest
         FROM (SELECT coalesce(json_object_agg(c.node_id, c.handlers ORDER BY c.node_id), '{}')
                      AS live
               FROM (SELECT n.node_id, n.handlers
                     FROM pgpulse_nodes n
                     WHERE n.node_id <> %(node)s AND n.state = 'alive'
                       AND n.last_heartbeat > clock.now - make_interval(secs => %(ttl)s)
                     UNION ALL
                     SELECT me.node_id, me.handlers FROM me WHERE me.state = 'alive') AS c) AS l
     ) AS members;

-- name: reap_job_leases
-- The lease sweeper's part for job rows: a running job whose lease expired more than
-- %(older_than)s seconds ago (0: the leader's sweep; a backup's waits) goes back to idle, due
-- at once, the lost attempt an interruption; its run row is written (or kept) 'retrying' with
-- that attempt, so the next claim is the next attempt of the same run; its shard is woken.
-- Locks: at most %(limit)s expired job rows, oldest lease first, FOR UPDATE SKIP LOCKED (a
-- sweeper never waits for a row another statement holds; reaping twice is harmless), and their
-- run rows.
-- Fences: only a row still running with an expired lease; its holder's token no longer names a
-- running row, so its late outcome or renewal changes nothing. Nothing expired: one index probe.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), expired AS (
    SELECT j.id, j.scheduled_for, j.attempt, j.locked_by, j.fencing_token, j.run_id, j.claimed_at
    FROM pgpulse_jobs j
    WHERE j.status = 'running'
      AND j.lease_expires_at < coalesce(%(now)s::timestamptz, now())
                               - make_interval(secs => %(older_than)s::float8)
    ORDER BY j.lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), job AS (
    UPDATE pgpulse_jobs j
    SET status = 'idle', next_run_at = clock.now,
        last_error = 'lease of node ' || coalesce(j.locked_by, '?') || ' expired',
        interruptions = j.interruptions + 1,
        locked_by = NULL, lease_expires_at = NULL, updated_at = clock.now
    FROM expired, clock
    WHERE j.id = expired.id
    RETURNING j.id, j.last_error, pg_notify('pgpulse_wakeup', j.id::text)
), run AS (
    INSERT INTO pgpulse_runs AS r (id, job_id, scheduled_for, attempts, outcome, node_id,
                               fencing_token, started_at, error, attempt_ended_at)
    OVERRIDING SYSTEM VALUE
    -- never NULL for a claimed job; else an id as the claim draws one (its epoch)
    SELECT coalesce(e.run_id, nextval('pgpulse_runs_id_seq') + {epoch}),
           e.id, e.scheduled_for, e.attempt, 'retrying', e.locked_by, e.fencing_token,
           e.claimed_at, job.last_error, clock.now
    FROM expired e JOIN job ON job.id = e.id CROSS JOIN clock
    ON CONFLICT (job_id, scheduled_for) WHERE kind = 'scheduled' DO UPDATE
    {attempt_written_over}
    RETURNING r.id
)
SELECT count(*)::int AS reaped FROM job;

-- name: reap_occurrence_leases
-- The lease sweeper's part for extra occurrences (triggers, backfills, overlap forks), as
-- reap_job_leases: an occurrence whose lease expired more than %(older_than)s seconds ago is
-- due again at once, the lost attempt an interruption; its run row is written (or kept)
-- 'retrying' with that attempt (earlier attempts kept); its batch's running count is released;
-- its job's shard is woken.
-- Locks: at most %(limit)s expired occurrence rows, oldest lease first, FOR UPDATE SKIP LOCKED,
-- their run rows and their batches' rows. Fences: as reap_job_leases (a lease cleared leaves
-- its holder's token naming no lease). Nothing expired: one probe of pgpulse_occurrences_leases.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), expired AS (
    SELECT o.id
    FROM pgpulse_occurrences o
    WHERE o.lease_expires_at IS NOT NULL
      AND o.lease_expires_at < coalesce(%(now)s::timestamptz, now())
                               - make_interval(secs => %(older_than)s::float8)
    ORDER BY o.lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
), occurrence AS (
    UPDATE pgpulse_occurrences o
    SET lease_expires_at = NULL, next_run_at = clock.now, interruptions = o.interruptions + 1
    FROM clock
    WHERE o.id = ANY(ARRAY(SELECT id FROM expired))
    RETURNING o.id, o.job_id, o.kind, o.scheduled_for, o.batch_id, o.attempt, o.locked_by,
              o.fencing_token, o.claimed_at, pg_notify('pgpulse_wakeup', o.job_id::text)
), run AS (
    -- an occurrence's id was drawn (with its epoch) when it was made
    INSERT INTO pgpulse_runs AS r (id, job_id, scheduled_for, attempts, outcome, node_id,
                                   fencing_token, started_at, error, kind, batch_id,
                                   attempt_ended_at)
    OVERRIDING SYSTEM VALUE
    SELECT e.id, e.job_id, e.scheduled_for, e.attempt, 'retrying', e.locked_by, e.fencing_token,
           e.claimed_at, 'lease of node ' || coalesce(e.locked_by, '?') || ' expired', e.kind,
           e.batch_id, clock.now
    FROM occurrence e CROSS JOIN clock
    ON CONFLICT (id, scheduled_for) DO UPDATE
    {attempt_written_over}
    RETURNING 1
), counted AS (
    UPDATE pgpulse_batches b
    SET running = b.running - d.n
    FROM (SELECT batch_id, count(*)::int AS n FROM occurrence GROUP BY batch_id) d
    WHERE b.id = d.batch_id
    RETURNING 1
)
SELECT count(*)::int AS reaped FROM occurrence;

-- name: end_pauses
-- Pauses that reached their --until end %(older_than)s seconds ago (0: the leader's sweep; a
-- backup's waits): the job is idle again, due at once (the claim records the occurrences inside
-- the pause as skipped: resume_mode skip, judged at resumed_at), its shard is woken, and the
-- resume goes into the audit trail (source 'node', actor 'node:<%(node)s>', the old
-- paused_until read from this statement's snapshot).
-- Locks: the paused job rows whose end came (waits for one another statement holds). Fences:
-- only a job still paused with that end. Nothing ended: one probe of pgpulse_jobs_pause_ends.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), unpaused AS (
    UPDATE pgpulse_jobs j
    SET status = 'idle', resume_mode = 'skip', resumed_at = clock.now, paused_until = NULL,
        pause_reason = NULL, failures = 0,
        next_run_at = least(j.scheduled_for + pgpulse_spread_offset(j.id, j.spread), clock.now),
        updated_at = clock.now
    FROM clock
    WHERE j.status = 'paused'
      AND j.paused_until <= clock.now - make_interval(secs => %(older_than)s::float8)
    RETURNING j.id, j.tenant, j.name, j.revision, pg_notify('pgpulse_wakeup', j.id::text)
), audit AS (
    INSERT INTO pgpulse_job_history (job_id, tenant, name, at, action, source, actor, revision,
                                     changes)
    SELECT u.id, u.tenant, u.name, clock.now, 'resume', 'node',
           'node:' || coalesce(%(node)s::text, '?'), u.revision,
           jsonb_build_object('paused_until', jsonb_build_array(o.paused_until, NULL))
    FROM unpaused u
    JOIN pgpulse_jobs o ON o.id = u.id
    CROSS JOIN clock
)
SELECT count(*)::int AS resumed FROM unpaused;

-- name: stop_node
-- A node says it stopped (its id is free at once): only its own row, not one another process
-- took over (NULL pid: any).
UPDATE pgpulse_nodes n
SET state = 'stopped', running = 0, shards = '{}', last_heartbeat = coalesce(%(now)s::timestamptz, now())
WHERE n.node_id = %(node)s
  AND (%(pid)s::int IS NULL OR (n.hostname, n.pid) = (%(hostname)s::text, %(pid)s::int));

-- name: prune
-- Housekeeping (leader only), beside the history's (pgpulse.db.history: runs_* and prune_*
-- below): forget audit-trail rows older than %(keep)s seconds (the runs' retention), nodes that
-- have been silent for %(node_retention)s seconds (a day: NODE_RETENTION in pgpulse.claims)
-- unless a lease still names them (a running job or an occurrence they hold: reaping it clears
-- that first, so the row that says who holds a lease is never the one missing),
-- and trigger and backfill batches as old whose occurrences have all run (a job's overlap and
-- after batches stay with it), and as old flows of upstream runs and decided joins
-- (docs/chains.md).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), batches AS (
    DELETE FROM pgpulse_batches b
    USING clock
    WHERE b.kind NOT IN ('overlap', 'after')
      AND b.created_at < clock.now - make_interval(secs => %(keep)s)
      AND NOT EXISTS (SELECT 1 FROM pgpulse_occurrences o WHERE o.batch_id = b.id)
    RETURNING 1
), nodes AS (
    DELETE FROM pgpulse_nodes n
    USING clock
    WHERE n.last_heartbeat < clock.now - make_interval(secs => %(node_retention)s)
      AND NOT EXISTS (SELECT 1
                      FROM pgpulse_jobs j
                      WHERE j.status = 'running'
                        AND j.locked_by = n.node_id)
      AND NOT EXISTS (SELECT 1
                      FROM pgpulse_occurrences o
                      WHERE o.lease_expires_at IS NOT NULL
                        AND o.locked_by = n.node_id)
    RETURNING 1
), flows AS (
    DELETE FROM pgpulse_flows f
    USING clock
    WHERE f.created_at < clock.now - make_interval(secs => %(keep)s)
    RETURNING 1
), joins AS (
    DELETE FROM pgpulse_after_waits w
    USING clock
    WHERE w.state <> 'waiting' AND w.updated_at < clock.now - make_interval(secs => %(keep)s)
    RETURNING 1
), history AS (
    DELETE FROM pgpulse_job_history h
    USING clock
    WHERE h.at < clock.now - make_interval(secs => %(keep)s)
    RETURNING 1
)
SELECT (SELECT count(*) FROM nodes) AS nodes, (SELECT count(*) FROM history) AS history;

-- name: runs_partitions
-- The partitions of pgpulse_runs (migration 0023) and their bounds, as PostgreSQL prints them
-- (FROM (lower) TO (upper), read back as instants): lower is NULL for MINVALUE (the partition
-- made of the history from before 0023), both are NULL for the default partition. With the
-- database's clock (or %(now)s) on every row: there is always the default partition.
SELECT c.relname AS name,
       b.bound = 'DEFAULT' AS is_default,
       substring(b.bound FROM 'FROM \(''([^'']+)''\)')::timestamptz AS lower,
       substring(b.bound FROM 'TO \(''([^'']+)''\)')::timestamptz AS upper,
       coalesce(%(now)s::timestamptz, now()) AS now
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b
WHERE i.inhparent = 'pgpulse_runs'::regclass
ORDER BY 4 NULLS FIRST, 1;

-- name: runs_partition_add
-- The script that adds the partition of pgpulse_runs for the UTC day from %(day)s, sent as one
-- message, so one transaction that commits without waiting on the client (pgpulse.db.history):
-- its locks wait at most %(lock_timeout)s; a table made like pgpulse_runs; the rows the default
-- partition holds for that day moved into it (none, unless the day's partition comes late);
-- then attached: SHARE UPDATE EXCLUSIVE on pgpulse_runs, so reads and writes go on, and a read
-- of the default partition to check it holds no row of that day.
SELECT format('SET LOCAL lock_timeout = %%L; '
              'CREATE TABLE %%I (LIKE pgpulse_runs INCLUDING DEFAULTS INCLUDING CONSTRAINTS); '
              'WITH moved AS (DELETE FROM pgpulse_runs_default WHERE scheduled_for >= %%L'
              ' AND scheduled_for < %%L RETURNING *) INSERT INTO %%I SELECT * FROM moved; '
              'ALTER TABLE pgpulse_runs ATTACH PARTITION %%I FOR VALUES FROM (%%L) TO (%%L)',
              %(lock_timeout)s::text, d.name, d.lower, d.upper, d.name, d.name, d.lower,
              d.upper) AS script
FROM (SELECT 'pgpulse_runs_' || to_char(%(day)s::timestamptz AT TIME ZONE 'UTC', 'YYYYMMDD')
                 AS name,
             %(day)s::timestamptz AS lower,
             %(day)s::timestamptz + interval '1 day' AS upper) d;

-- name: runs_partition_drop
-- The script that drops partition %(name)s of pgpulse_runs, [%(lower)s, %(upper)s) (NULL
-- lower: MINVALUE), sent as one message, so one transaction that commits without waiting on
-- the client (pgpulse.db.history): its locks wait at most %(lock_timeout)s; a SHARE lock on the
-- partition, so no row arrives while it is checked; the check: a run the retention keeps (not
-- finished, or finished less than %(keep)s seconds before the database's clock or %(now)s;
-- through the BRIN index on finished_at) ends the script with object_in_use, nothing dropped;
-- then detached and dropped (ACCESS EXCLUSIVE on pgpulse_runs for the catalogue change).
SELECT format('SET LOCAL lock_timeout = %%L; LOCK TABLE %%I IN SHARE MODE; '
              'DO $kept$ BEGIN IF EXISTS (SELECT 1 FROM pgpulse_runs r'
              ' WHERE r.scheduled_for >= %%L AND r.scheduled_for < %%L'
              ' AND (r.finished_at IS NULL OR r.finished_at >= %%L))'
              ' THEN RAISE EXCEPTION %%L USING ERRCODE = %%L; END IF; END $kept$; '
              'ALTER TABLE pgpulse_runs DETACH PARTITION %%I; DROP TABLE %%I',
              %(lock_timeout)s::text, %(name)s::text,
              coalesce(%(lower)s::timestamptz, '-infinity'), %(upper)s::timestamptz,
              coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(keep)s),
              'a run of ' || %(name)s || ' is kept', 'object_in_use',
              %(name)s::text, %(name)s::text) AS script;

-- name: runs_partition_rows
-- The runs of partition %(name)s of pgpulse_runs, [%(lower)s, %(upper)s) (NULL lower: MINVALUE;
-- the plan reads that partition only): counted when the statistics say it holds fewer than
-- 100,000, their estimate otherwise (a count would read a whole day to report it).
SELECT CASE WHEN c.reltuples >= 100000 THEN c.reltuples::bigint
            ELSE (SELECT count(*)
                  FROM pgpulse_runs r
                  WHERE r.scheduled_for >= coalesce(%(lower)s::timestamptz, '-infinity')
                    AND r.scheduled_for < %(upper)s::timestamptz) END AS rows
FROM pg_class c
WHERE c.oid = format('%%I', %(name)s::text)::regclass;

-- name: prune_runs
-- At most %(batch)s runs forgotten that finished more than %(keep)s seconds before the
-- database's clock (or %(now)s), the global retention, row by row: what the partitions dropped
-- whole leave (a day's partition that held a run finishing later, the partition from before
-- migration 0023, the default one). A run finishes after its occurrence's instant, so only the
-- partitions older than the retention are read (the condition on scheduled_for prunes the rest
-- from the plan; a row against that rule would only be kept longer, until its day is dropped).
WITH doomed AS (
    SELECT r.id, r.scheduled_for
    FROM pgpulse_runs r
    WHERE r.finished_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(keep)s)
      AND r.scheduled_for < coalesce(%(now)s::timestamptz, now())
                            - make_interval(secs => %(keep)s)
    LIMIT %(batch)s
), {delete_doomed_runs};

-- name: prune_job_runs
-- At most %(batch)s finished runs forgotten by their job's own retention, keep_runs: 'Nd', those
-- finished more than N days before the database's clock (or %(now)s); 'N', those older (by id)
-- than the job's newest N runs. A running or retrying run stays. Per job, the oldest first,
-- through pgpulse_runs_recent; a job's N-th newest run is found once, through the same index.
WITH keeping AS (
    SELECT j.id,
           substring(j.keep_runs FROM '^([0-9]+)d$')::int AS days,
           substring(j.keep_runs FROM '^([0-9]+)$')::int AS newest
    FROM pgpulse_jobs j
    WHERE j.keep_runs IS NOT NULL
), doomed AS (
    SELECT p.id, p.scheduled_for
    FROM keeping k
    LEFT JOIN LATERAL (SELECT q.id
                       FROM pgpulse_runs q
                       WHERE q.job_id = k.id
                       ORDER BY q.id DESC
                       OFFSET k.newest LIMIT 1) last ON k.newest IS NOT NULL
    CROSS JOIN LATERAL (
        SELECT r.id, r.scheduled_for
        FROM pgpulse_runs r
        WHERE r.job_id = k.id
          AND r.finished_at IS NOT NULL
          AND CASE WHEN k.days IS NOT NULL
                   THEN r.finished_at < coalesce(%(now)s::timestamptz, now())
                                        - make_interval(days => k.days)
                        AND r.scheduled_for < coalesce(%(now)s::timestamptz, now())
                                              - make_interval(days => k.days)
                   ELSE r.id <= last.id END
        ORDER BY r.id
        LIMIT %(batch)s) p
    LIMIT %(batch)s
), {delete_doomed_runs};

-- name: upsert_job
-- Create or update job (tenant, name); Store.upsert_jobs sends it only for a definition that
-- changes, so an update is always a new revision. A new job, or one whose occurrences changed
-- (schedule, time zone or active window), gets %(scheduled_for)s as its next occurrence
-- (limits.first_in_window after the database's now, read in the same transaction) and
-- %(status)s ('idle', or 'completed' when the window holds no occurrence); an unchanged schedule
-- keeps the job's state, so re-importing is a no-op. The occurrence is claimable at
-- scheduled_for plus the job's spread offset (pgpulse_spread_offset: the id of a new job is
-- drawn first, so the offset is known in this statement). A paused, failed or running job keeps
-- its status (an idle one between two attempts of a run, with a pause requested, whose
-- occurrences change is paused: its run ends here); a job completed by max_runs whose max_runs
-- is raised (or removed) is idle again (revive), from %(scheduled_for)s (its first occurrence
-- after now, as a new job's): the time it was completed is not caught up, nor recorded as
-- skipped.
-- The job is found by its name in pgpulse_job_names: updated if there, inserted if not. Two
-- sessions creating one new name at once: the second's insert of the name waits for the first
-- and fails with unique_violation (pgpulse_job_names_pkey), rolling its statement back; so does
-- a job deleted between the lookup and the update (no row returned). The caller retries: the
-- next try finds the name (Store.upsert_jobs).
-- The definition is one JSON object, %(definition)s (writes.definition_params), read as a row
-- of pgpulse_jobs (d: each value converted by its column's type, domains checked), so a new
-- column is a name in d, the SET and the INSERT, not a parameter and a cast.
WITH d AS (
    SELECT {definition_written}
    FROM jsonb_populate_record(NULL::pgpulse_jobs, %(definition)s)
), found AS (
    SELECT n.job_id,
           (j.schedule, j.timezone) = (d.schedule, d.timezone) AS same_schedule,
           (j.schedule, j.timezone, j.not_before, j.not_after)
               IS NOT DISTINCT FROM (d.schedule, d.timezone, d.not_before, d.not_after)
               OR j.status = 'running' AS keep,
           j.status = 'completed' AND j.schedule_kind <> 'once'
               AND j.max_runs IS NOT NULL AND j.runs_done >= j.max_runs
               AND (j.not_after IS NULL OR j.scheduled_for <= j.not_after)
               AND (d.max_runs IS NULL OR j.runs_done < d.max_runs)
               AND %(status)s::text = 'idle' AS revive
    FROM d, pgpulse_job_names n
    JOIN pgpulse_jobs j ON j.id = n.job_id
    WHERE n.tenant = %(tenant)s AND n.name = %(name)s
), updated AS (
    UPDATE pgpulse_jobs j
    SET ({definition_written})
            = (SELECT * FROM d),
        schedule_kind = %(schedule_kind)s, revision = j.revision + 1,
        status = CASE WHEN j.status IN ('running', 'paused', 'failed') THEN j.status
                      -- a run between attempts, with a pause requested, ends here: paused
                      WHEN NOT found.keep AND j.pause_requested AND %(status)s = 'idle'
                      THEN 'paused'
                      WHEN NOT found.keep THEN %(status)s
                      WHEN j.runs_done >= d.max_runs THEN 'completed'
                      WHEN found.revive THEN 'idle'
                      ELSE j.status END,
        anchor_at = CASE WHEN found.same_schedule THEN j.anchor_at ELSE %(anchor_at)s END,
        scheduled_for = CASE WHEN found.keep AND NOT found.revive THEN j.scheduled_for
                             ELSE %(scheduled_for)s END,
        next_run_at = CASE WHEN NOT found.keep OR found.revive
                           THEN %(scheduled_for)s + pgpulse_spread_offset(j.id, d.spread)
                           WHEN j.spread <> d.spread AND j.status = 'idle' AND j.attempt = 0
                           THEN j.scheduled_for + pgpulse_spread_offset(j.id, d.spread)
                           ELSE j.next_run_at END,
        attempt = CASE WHEN found.keep AND NOT found.revive THEN j.attempt ELSE 0 END,
        interruptions = CASE WHEN found.keep AND NOT found.revive THEN j.interruptions ELSE 0 END,
        run_id = CASE WHEN found.keep AND NOT found.revive THEN j.run_id END,
        pause_requested = j.pause_requested AND found.keep,
        updated_at = now()
    FROM found, d
    WHERE j.id = found.job_id
    RETURNING j.id, j.shard_id, j.revision, false AS created
), new_id AS (
    SELECT nextval('pgpulse_jobs_id_seq') AS id
    WHERE NOT EXISTS (SELECT 1 FROM found)
), inserted AS (
    INSERT INTO pgpulse_jobs ({definition_written}, id, tenant, name, schedule_kind, status,
                              anchor_at, scheduled_for, next_run_at)
    OVERRIDING SYSTEM VALUE
    SELECT d.*, new_id.id, %(tenant)s::text, %(name)s::text, %(schedule_kind)s::text,
           %(status)s::text, %(anchor_at)s::timestamptz, %(scheduled_for)s::timestamptz,
           %(scheduled_for)s::timestamptz + pgpulse_spread_offset(new_id.id, d.spread)
    FROM new_id, d
    RETURNING id, shard_id, revision, true AS created
)
SELECT w.id, w.shard_id, w.revision, w.created, pg_notify('pgpulse_wakeup', w.id::text)
FROM (SELECT * FROM updated UNION ALL SELECT * FROM inserted) w;

-- name: calendars_of_tenant
-- The calendars named %(names)s of tenant %(tenant)s that exist, locked FOR SHARE until the end
-- of the transaction: a job that names them is written only while none of them can be deleted.
SELECT c.name
FROM pgpulse_calendars c
WHERE c.tenant = %(tenant)s
  AND c.name = ANY(%(names)s::text[])
ORDER BY c.name
FOR SHARE;

-- name: lock_definitions
-- The definition (durations in seconds), revision and status of each existing job among the
-- names (%(tenants)s[i], %(names)s[i]), each row locked until the end of the transaction: a
-- write checks who may write each definition against the job it replaces (pgpulse.access) and
-- diffs it (pgpulse.audit), and nothing changes that job in between. Found through
-- pgpulse_job_names' primary key; rows are locked in id order, as every statement over
-- several job rows takes them.
SELECT {definition_columns}
FROM unnest(%(tenants)s::text[], %(names)s::text[]) AS w(tenant, name)
JOIN pgpulse_job_names n ON n.tenant = w.tenant AND n.name = w.name
JOIN pgpulse_jobs j ON j.id = n.job_id
ORDER BY j.id
FOR UPDATE OF j;

-- name: lock_definitions_and_sources
-- As lock_definitions, and also every job whose source is in %(sources)s (apply, crontab sync,
-- a node's start: a scan of pgpulse_jobs, which has no index on source; see migration 0003).
SELECT {definition_columns}
FROM pgpulse_jobs j
WHERE j.id IN (SELECT n.job_id
               FROM unnest(%(tenants)s::text[], %(names)s::text[]) AS w(tenant, name)
               JOIN pgpulse_job_names n ON n.tenant = w.tenant AND n.name = w.name)
   OR j.source = ANY(%(sources)s::text[])
ORDER BY j.id
FOR UPDATE OF j;

-- name: lock_source
-- Serialise the writers of one source (pgpulse apply, crontab import --sync, a node declaring
-- its app's jobs) until the end of the transaction: a second apply of the same files waits,
-- then plans against what the first wrote. Key: the source's hash in the class 'pgpulse
-- source' (two-key advisory locks; the leader lock uses the one-key space).
SELECT pg_advisory_xact_lock(hashtext('pgpulse source'), hashtext(%(source)s));

-- name: record_change
-- One row of the audit trail, in the writing transaction (pgpulse.audit).
INSERT INTO pgpulse_job_history (job_id, tenant, name, at, action, source, actor, revision,
                                 changes)
VALUES (%(job_id)s, %(tenant)s, %(name)s, coalesce(%(now)s::timestamptz, now()), %(action)s,
        %(source)s, %(actor)s, %(revision)s, %(changes)s);

-- name: rename_job
-- crontab import --sync: an edited line keeps its job (id, history) under the name its new
-- content gives (pgpulse_job_names follows through its trigger).
UPDATE pgpulse_jobs SET name = %(new_name)s, updated_at = now()
WHERE id = %(id)s;

-- name: now
SELECT now() AS db_now;

-- name: session_read_only
-- Whether this session's server refuses writes: a standby (an old primary rejoined) or a
-- primary made read-only. Sessions that never write (LISTEN, a pool's idle connections) ask,
-- and move (database.session_is_read_only).
SELECT pg_is_in_recovery() OR current_setting('transaction_read_only')::bool AS read_only;

-- name: host_role
-- One host of a multi-host DSN, asked on a connection of its own (pgpulse.split_brain): whether
-- it accepts writes (not in recovery, not transaction_read_only), and the timeline it writes on,
-- as the claim reads it (the WAL file name's first 8 hex digits: no privilege but CONNECT; a
-- standby has none to report). Every promotion starts a timeline, so of two writable hosts the
-- one on the higher timeline is the newer primary.
SELECT NOT pg_is_in_recovery()
       AND NOT current_setting('transaction_read_only')::bool AS writable,
       CASE WHEN NOT pg_is_in_recovery()
            THEN ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint
       END AS timeline;

-- name: get_job
SELECT j.*, {definition_intervals}
FROM pgpulse_jobs j
WHERE j.id = (SELECT n.job_id FROM pgpulse_job_names n WHERE n.tenant = %(tenant)s AND n.name = %(name)s);

-- name: list_jobs
SELECT j.id, j.tenant, j.name, j.schedule, j.timezone, j.handler, j.catch_up, j.status,
       j.paused_until, j.pause_reason, j.pause_requested, j.scheduled_for, j.next_run_at,
       j.attempt, j.locked_by,
       j.last_outcome, j.last_error, j.last_finished_at, j.spread, j.not_before, j.not_after,
       j.max_runs, j.runs_done, j.calendars, j.auto_pause_after, j.failures, j.after,
       j.concurrency_key, j.priority
FROM pgpulse_job_names n JOIN pgpulse_jobs j ON j.id = n.job_id
WHERE (%(tenant)s::text IS NULL OR n.tenant = %(tenant)s)
ORDER BY n.tenant, n.name;

-- name: tenants_with_job_name
-- The tenants that have a job named %(name)s (at most five): the hint of a "no job named"
-- refusal in another tenant.
SELECT tenant
FROM pgpulse_job_names
WHERE name = %(name)s
ORDER BY tenant
LIMIT 5;

-- name: set_skips
-- Write job %(job_id)s's list of occurrences to skip (core.skips) as %(skips)s (NULL: none),
-- unless the job changed since the caller read it: its skips are no longer %(old)s, or its
-- schedule, zone or anchor moved (the list was computed from them). Records the change in the
-- audit trail (%(action)s 'skip' or 'unskip', by %(source)s / %(actor)s, with %(reason)s) in
-- the same statement. Returns whether the job was found unchanged and whether it was written
-- (the same list is not written again).
WITH target AS (
    SELECT j.id, j.tenant, j.name, j.revision, j.skips
    FROM pgpulse_jobs AS j
    WHERE j.id = %(job_id)s AND j.skips IS NOT DISTINCT FROM %(old)s::jsonb
      AND j.schedule = %(schedule)s AND j.timezone = %(timezone)s
      AND j.anchor_at = %(anchor_at)s
    FOR NO KEY UPDATE
), written AS (
    UPDATE pgpulse_jobs AS j
    SET skips = %(skips)s::jsonb, updated_at = now()
    FROM target AS t
    WHERE j.id = t.id AND t.skips IS DISTINCT FROM %(skips)s::jsonb
    RETURNING j.id
), audit AS (
    INSERT INTO pgpulse_job_history (job_id, tenant, name, action, source, actor, revision,
                                     changes)
    SELECT t.id, t.tenant, t.name, %(action)s, %(source)s, %(actor)s, t.revision,
           jsonb_strip_nulls(jsonb_build_object(
               'skips', jsonb_build_array(t.skips, %(skips)s::jsonb),
               'reason', CASE WHEN %(reason)s::text IS NOT NULL
                              THEN jsonb_build_array(NULL, %(reason)s::text) END))
    FROM target AS t JOIN written AS w ON w.id = t.id
    RETURNING 1
)
SELECT (SELECT count(*) FROM target) AS found, (SELECT count(*) FROM written) AS written;

-- name: pause_job
-- Pause job (%(tenant)s, %(name)s). An idle, failed or paused job is paused at once (a paused one
-- takes %(until)s and %(reason)s where given, and keeps its own where not; an empty %(reason)s
-- is given, and clears the reason): it is not claimed until resumed, by hand or, at
-- %(until)s, by the leader's heartbeat. A running job is not stopped: its pause is requested
-- (pause_requested, with the same until and reason), and the write that ends its run pauses it
-- (finish_and_claim, fork_occurrence; a retry of the run still happens); meanwhile no pending
-- extra occurrence of it starts. A completed job is left as it is: the caller says so. Returns
-- the status it had, whether it was paused (or its pause requested) already, the run it runs
-- (run id, node), whether it was written and its pause's until and reason; a job whose pause (or
-- request) already has this until and reason is not written. A pause goes into the audit trail
-- (%(source)s, %(actor)s) in the same statement, with its until, reason and a new request as
-- changes.
WITH target AS (
    SELECT j.id, j.status, j.paused_until, j.pause_reason, j.pause_requested, j.run_id,
           j.locked_by,
           j.status = 'paused' OR (j.status = 'running' AND j.pause_requested) AS already,
           -- the pause's until and reason: as given, or a pause's own where not given
           CASE WHEN (j.status = 'paused' OR j.pause_requested) AND %(until)s::timestamptz IS NULL
                THEN j.paused_until ELSE %(until)s::timestamptz END AS until,
           CASE WHEN (j.status = 'paused' OR j.pause_requested) AND %(reason)s::text IS NULL
                THEN j.pause_reason ELSE nullif(%(reason)s::text, '') END AS reason
    FROM pgpulse_jobs j
    WHERE j.id = (SELECT n.job_id FROM pgpulse_job_names n WHERE n.tenant = %(tenant)s AND n.name = %(name)s)
    FOR UPDATE
), paused AS (
    UPDATE pgpulse_jobs j
    SET status = CASE WHEN target.status = 'running' THEN 'running' ELSE 'paused' END,
        pause_requested = target.status = 'running',
        paused_until = target.until,
        pause_reason = target.reason,
        updated_at = now()
    FROM target
    WHERE j.id = target.id
      AND target.status IN ('idle', 'failed', 'paused', 'running')
      -- a pause (or request) that already has this until and reason is left as it is
      AND (NOT target.already
           OR (j.paused_until, j.pause_reason) IS DISTINCT FROM (target.until, target.reason))
    RETURNING j.id, j.tenant, j.name, j.revision, j.paused_until, j.pause_reason,
              j.pause_requested
), audit AS (
    INSERT INTO pgpulse_job_history (job_id, tenant, name, action, source, actor, revision,
                                     changes)
    SELECT p.id, p.tenant, p.name, 'pause', %(source)s, %(actor)s, p.revision,
           jsonb_strip_nulls(jsonb_build_object(
               'paused_until', CASE WHEN p.paused_until IS DISTINCT FROM t.paused_until
                                    THEN jsonb_build_array(t.paused_until, p.paused_until) END,
               'pause_reason', CASE WHEN p.pause_reason IS DISTINCT FROM t.pause_reason
                                    THEN jsonb_build_array(t.pause_reason, p.pause_reason) END,
               'pause_requested', CASE WHEN p.pause_requested AND NOT t.pause_requested
                                       THEN jsonb_build_array(false, true) END))
    FROM paused p
    JOIN target t ON t.id = p.id
)
SELECT target.status AS was, target.already, target.run_id, target.locked_by,
       p.id IS NOT NULL AS written,
       CASE WHEN p.id IS NULL THEN target.paused_until ELSE p.paused_until END AS paused_until,
       CASE WHEN p.id IS NULL THEN target.pause_reason ELSE p.pause_reason END AS pause_reason
FROM target
LEFT JOIN paused AS p ON true;

-- name: lock_job_to_pause
-- The job (%(tenant)s, %(name)s) a pause that cancels its runs works on, its row locked until
-- the end of the transaction: its claim cannot end, be renewed or be reaped meanwhile, and no
-- claim takes it (SKIP LOCKED), so what the caller decides from it stays true until it writes.
SELECT j.id, j.status, j.pause_requested, j.schedule, j.timezone, j.anchor_at, j.scheduled_for,
       j.not_after, j.fencing_token, j.run_id, j.locked_by
FROM pgpulse_jobs j
WHERE j.id = (SELECT n.job_id FROM pgpulse_job_names n WHERE n.tenant = %(tenant)s AND n.name = %(name)s)
FOR UPDATE;

-- name: cancel_job_run
-- Record the run of job %(job_id)s's own claim 'cancelled' with %(error)s, if the job still runs
-- under %(token)s (its row locked by lock_job_to_pause in the same transaction; pause_cancelling
-- takes the lease away next): as overlap replace records an occurrence it cancels, an earlier
-- attempt of the run appended to earlier_attempts. Returns the run's id (none: it did not run).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), t AS (
    SELECT j.id, j.scheduled_for, j.attempt, j.locked_by, j.fencing_token, j.run_id, j.claimed_at
    FROM pgpulse_jobs AS j
    WHERE j.id = %(job_id)s AND j.status = 'running' AND j.fencing_token = %(token)s
)
INSERT INTO pgpulse_runs AS r (
        id, job_id, scheduled_for, attempts, outcome, node_id, fencing_token, started_at,
        finished_at, error
    )
    OVERRIDING SYSTEM VALUE
    -- never NULL for a claimed job; else an id as the claim draws one (its epoch)
    SELECT coalesce(t.run_id, nextval('pgpulse_runs_id_seq') + {epoch}),
           t.id, t.scheduled_for, t.attempt, 'cancelled', t.locked_by,
           t.fencing_token, t.claimed_at, clock.now, %(error)s
    FROM t CROSS JOIN clock
    ON CONFLICT (job_id, scheduled_for) WHERE kind = 'scheduled' DO UPDATE
    {attempt_written_over}
    RETURNING r.id;

-- name: pause_cancelling
-- Pause job %(job_id)s and stop what it runs now (its row locked by lock_job_to_pause in the
-- same transaction; its running extra occurrences, and its own run if it runs, already recorded
-- cancelled: %(cancelled)s, their run ids, by cancel_running_occurrences and cancel_job_run).
-- The job row's own claim, if it runs under %(token)s, is cancelled as overlap replace cancels
-- an occurrence: its lease is taken away (its holder's next renewal is refused and it cancels
-- the attempt; its late writes change nothing), and the job moves past the cancelled occurrence to %(scheduled_for)s, the next one
-- (computed by the caller from the schedule), with status %(status)s: 'paused' with %(until)s
-- and %(reason)s, or 'completed' when the schedule has none left. A job that does not run keeps
-- its occurrence and is paused. The pause goes into the audit trail (%(source)s, %(actor)s) with
-- its until, reason and the cancelled runs as changes (a job paused, or its pause requested,
-- already keeps its until and reason when neither is given). Returns the status before, the
-- node and occurrence of its claim, whether the job row was written, and its pause's until and
-- reason.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), target AS (
    SELECT j.id, j.tenant, j.name, j.revision, j.status, j.paused_until, j.pause_reason,
           j.scheduled_for, j.attempt, j.locked_by, j.fencing_token, j.run_id, j.claimed_at,
           j.status = 'running' AND j.fencing_token = %(token)s AS held,
           -- paused (or its pause requested) already: its pause keeps the until and the reason
           -- not given, as pause_job keeps them
           j.status = 'paused' OR j.pause_requested AS keep
    FROM pgpulse_jobs j
    WHERE j.id = %(job_id)s
      AND j.status IN ('idle', 'failed', 'paused', 'running')
), job AS (
    UPDATE pgpulse_jobs AS j
    SET status = %(status)s,
        scheduled_for = CASE WHEN t.held THEN %(scheduled_for)s ELSE j.scheduled_for END,
        next_run_at = CASE WHEN t.held
                           THEN %(scheduled_for)s + pgpulse_spread_offset(j.id, j.spread)
                           ELSE j.next_run_at END,
        attempt = CASE WHEN t.held THEN 0 ELSE j.attempt END,
        interruptions = CASE WHEN t.held THEN 0 ELSE j.interruptions END,
        run_id = CASE WHEN t.held THEN NULL ELSE j.run_id END,
        locked_by = NULL,
        lease_expires_at = NULL,
        last_outcome = CASE WHEN t.held THEN 'cancelled' ELSE j.last_outcome END,
        last_error = CASE WHEN t.held THEN %(error)s ELSE j.last_error END,
        last_finished_at = CASE WHEN t.held THEN clock.now ELSE j.last_finished_at END,
        paused_until = CASE WHEN %(status)s <> 'paused' THEN NULL
                            WHEN t.keep AND %(until)s::timestamptz IS NULL THEN j.paused_until
                            ELSE %(until)s::timestamptz END,
        pause_reason = CASE WHEN %(status)s <> 'paused' THEN NULL
                            WHEN t.keep AND %(reason)s::text IS NULL THEN j.pause_reason
                            ELSE nullif(%(reason)s::text, '') END,
        pause_requested = false,
        updated_at = clock.now
    FROM target AS t, clock
    -- the claim the caller saw, or none: else nothing changes (the caller holds the row lock)
    WHERE j.id = t.id
      AND (t.status = 'running') = t.held
    RETURNING j.id, j.tenant, j.name, j.revision, j.paused_until, j.pause_reason
), audit AS (
    INSERT INTO pgpulse_job_history (job_id, tenant, name, at, action, source, actor, revision,
                                     changes)
    SELECT p.id, p.tenant, p.name, clock.now, 'pause', %(source)s, %(actor)s, p.revision,
           jsonb_strip_nulls(jsonb_build_object(
               'paused_until', CASE WHEN p.paused_until IS DISTINCT FROM t.paused_until
                                    THEN jsonb_build_array(t.paused_until, p.paused_until) END,
               'pause_reason', CASE WHEN p.pause_reason IS DISTINCT FROM t.pause_reason
                                    THEN jsonb_build_array(t.pause_reason, p.pause_reason) END,
               'cancelled_runs', jsonb_build_array(
                   NULL,
                   to_jsonb(%(cancelled)s::bigint[])),
               'status', CASE WHEN %(status)s <> 'paused'
                              THEN jsonb_build_array(t.status, %(status)s::text) END))
    FROM job AS p
    JOIN target AS t ON t.id = p.id
    CROSS JOIN clock
)
SELECT t.status AS was, t.locked_by AS node_id,
       t.scheduled_for, job.id IS NOT NULL AS written, job.paused_until, job.pause_reason
FROM target AS t
LEFT JOIN job ON true;

-- name: resume_job
-- Resume a paused (or failed) job. With %(scheduled_for)s (mode skip: the first occurrence
-- after now) it holds that occurrence and the ones inside the pause never run, unrecorded
-- (%(status)s 'completed' when it has none left in its window).
-- Without it (modes once and backfill, %(mode)s) it keeps the occurrence it held, the first one
-- inside the pause, due at once when that is past (a future one keeps its instant); the claim
-- then applies %(mode)s to the occurrences at or before this instant (resumed_at; pgpulse.limits.resume_policy). A job's
-- pause, its reason and its count of consecutive failures end here. A job whose pause was
-- requested while it ran (pause_job) is not paused: the request is withdrawn (withdrawn), and
-- its run and the occurrences after it go on. The resume goes into the audit trail
-- (%(source)s, %(actor)s) in the same statement; a mode other than skip is recorded as a change
-- of resume_mode, a withdrawn request as a change of pause_requested.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), changed AS (
UPDATE pgpulse_jobs j
SET status = %(status)s,
    scheduled_for = coalesce(%(scheduled_for)s, j.scheduled_for),
    next_run_at = CASE WHEN %(scheduled_for)s::timestamptz IS NOT NULL
                       THEN %(scheduled_for)s + pgpulse_spread_offset(j.id, j.spread)
                       ELSE greatest(j.scheduled_for + pgpulse_spread_offset(j.id, j.spread),
                                  clock.now) END,
    attempt = CASE WHEN %(scheduled_for)s::timestamptz IS NULL THEN j.attempt ELSE 0 END,
    interruptions = CASE WHEN %(scheduled_for)s::timestamptz IS NULL THEN j.interruptions ELSE 0 END,
    run_id = CASE WHEN %(scheduled_for)s::timestamptz IS NULL THEN j.run_id END,
    resume_mode = %(mode)s,
    resumed_at = CASE WHEN %(mode)s::text IS NULL THEN NULL ELSE clock.now END,
    paused_until = NULL,
    pause_reason = NULL,
    pause_requested = false,
    failures = 0,
    last_error = NULL,
    updated_at = clock.now
FROM clock
WHERE j.id = (SELECT n.job_id FROM pgpulse_job_names n WHERE n.tenant = %(tenant)s AND n.name = %(name)s)
  AND j.status IN ('paused', 'failed')
RETURNING j.id, j.tenant, j.name, j.status, j.revision, j.shard_id
), withdrawn AS (
UPDATE pgpulse_jobs j
SET pause_requested = false,
    paused_until = NULL,
    pause_reason = NULL,
    updated_at = clock.now
FROM clock
WHERE j.id = (SELECT n.job_id FROM pgpulse_job_names n WHERE n.tenant = %(tenant)s AND n.name = %(name)s)
  AND j.status NOT IN ('paused', 'failed')
  AND j.pause_requested
RETURNING j.id, j.tenant, j.name, j.status, j.revision
), audit AS (
INSERT INTO pgpulse_job_history (job_id, tenant, name, at, action, source, actor, revision,
                                 changes)
SELECT c.id, c.tenant, c.name, clock.now, 'resume', %(source)s, %(actor)s, c.revision,
       CASE WHEN %(mode)s::text IS NULL THEN '{}'::jsonb
            ELSE jsonb_build_object('resume_mode', jsonb_build_array(NULL, %(mode)s::text)) END
FROM changed c, clock
UNION ALL
SELECT w.id, w.tenant, w.name, clock.now, 'resume', %(source)s, %(actor)s, w.revision,
       jsonb_build_object('pause_requested', jsonb_build_array(true, false))
FROM withdrawn w, clock
)
SELECT c.id, c.status, false AS withdrawn, pg_notify('pgpulse_wakeup', c.id::text)
FROM changed c
UNION ALL
SELECT w.id, w.status, true AS withdrawn, NULL
FROM withdrawn w;

-- name: trigger_job
-- Trigger now: an idle job whose next occurrence is in the future gets an extra occurrence at the
-- database's now; afterwards the schedule continues from that instant, which reaches the same
-- next occurrence. A job that is already due is left as it is (it runs now anyway). Recorded in
-- the audit trail in the same statement.
WITH changed AS (
UPDATE pgpulse_jobs j
SET scheduled_for = CASE WHEN j.scheduled_for > now() THEN now() ELSE j.scheduled_for END,
    run_id = CASE WHEN j.scheduled_for > now() THEN NULL ELSE j.run_id END,
    next_run_at = now(),
    updated_at = now()
WHERE j.id = (SELECT n.job_id FROM pgpulse_job_names n WHERE n.tenant = %(tenant)s AND n.name = %(name)s)
  AND j.status = 'idle'
RETURNING j.id, j.tenant, j.name, j.scheduled_for, j.revision, j.shard_id
), audit AS (
INSERT INTO pgpulse_job_history (job_id, tenant, name, action, source, actor, revision,
                                 changes)
SELECT c.id, c.tenant, c.name, 'trigger', %(source)s, %(actor)s, c.revision,
       jsonb_build_object('scheduled_for', jsonb_build_array(NULL, c.scheduled_for))
FROM changed c
)
SELECT c.id, c.scheduled_for, pg_notify('pgpulse_wakeup', c.id::text)
FROM changed c;

-- name: job_status
SELECT j.status FROM pgpulse_jobs j
WHERE j.id = (SELECT n.job_id FROM pgpulse_job_names n WHERE n.tenant = %(tenant)s AND n.name = %(name)s);

-- name: delete_job
-- Delete job %(id)s, or the job named (%(tenant)s, %(name)s) when %(id)s is null, and record it
-- in the audit trail (which outlives the job) in the same statement; %(now)s only from tests.
-- A shell job is deleted only when %(shell_allowed)s (pgpulse.access: removing a shell job's
-- definition is a write of it), decided on the row the statement deletes. The job's alert rules
-- and silences go with it (its alert events stay, as history): the cascade a foreign key would
-- do, which the alert tables leave out (0005_alerts.sql: no key checks on every job update).
WITH removed AS (
DELETE FROM pgpulse_jobs j
WHERE j.id = coalesce(%(id)s::bigint,
                      (SELECT n.job_id FROM pgpulse_job_names n
                       WHERE n.tenant = %(tenant)s AND n.name = %(name)s))
  AND (%(shell_allowed)s::bool OR j.handler <> 'shell')
RETURNING j.id, j.tenant, j.name, j.revision
), audit AS (
INSERT INTO pgpulse_job_history (job_id, tenant, name, at, action, source, actor, revision)
SELECT r.id, r.tenant, r.name, coalesce(%(now)s::timestamptz, now()), 'delete', %(source)s,
       %(actor)s, r.revision
FROM removed r
), rules AS (
DELETE FROM pgpulse_alert_rules a USING removed r WHERE a.job_id = r.id
), silences AS (
DELETE FROM pgpulse_alert_silences s USING removed r WHERE s.job_id = r.id
)
SELECT r.id, r.tenant, r.name FROM removed r;

-- name: job_history
-- The audit trail of the job named (%(tenant)s, %(name)s) now (under its earlier names too),
-- and of deleted jobs that had that name, newest first; a job renamed away from the name
-- (crontab import --sync) shows its rename, recorded under its new name, in both names'.
SELECT h.id, h.job_id, h.tenant, h.name, h.at, h.action, h.source, h.actor, h.revision,
       h.changes
FROM pgpulse_job_history h
WHERE (h.tenant = %(tenant)s AND h.name = %(name)s)
   OR h.job_id = (SELECT n.job_id FROM pgpulse_job_names n
                  WHERE n.tenant = %(tenant)s AND n.name = %(name)s)
   OR (h.job_id IN (SELECT o.job_id FROM pgpulse_job_history o
                    WHERE o.tenant = %(tenant)s AND o.name = %(name)s)
       AND h.changes -> 'name' ->> 0 = %(name)s)
ORDER BY h.id DESC
LIMIT %(limit)s;

-- name: job_history_by_id
-- The audit trail of job %(job_id)s (of %(tenant)s, unless null), newest first.
SELECT h.id, h.job_id, h.tenant, h.name, h.at, h.action, h.source, h.actor, h.revision,
       h.changes
FROM pgpulse_job_history h
WHERE h.job_id = %(job_id)s
  AND (%(tenant)s::text IS NULL OR h.tenant = %(tenant)s)
ORDER BY h.id DESC
LIMIT %(limit)s;

-- name: list_runs
-- Runs newest first, those running now included (pgpulse_runs_live), each with the revision of
-- the definition it ran under. A skipped summary row stands for its occurrences from
-- scheduled_for through last_scheduled_for. lag is from the spread instant to the run's first attempt
-- (NULL for a backfill's run: it runs on request, long after its occurrence, and is not late);
-- earlier_attempts lists the attempts before the latest.
SELECT r.id, j.tenant, j.name, r.scheduled_for, r.attempts, r.outcome, r.occurrences,
       coalesce(r.last_scheduled_for, r.scheduled_for) AS last_scheduled_for, r.node_id,
       r.started_at, r.first_started_at,
       r.finished_at, extract(epoch FROM r.finished_at - r.started_at)::float8 AS duration,
       CASE WHEN r.kind <> 'backfill'
            THEN extract(epoch FROM r.first_started_at - r.scheduled_for
                                    - pgpulse_spread_offset(j.id, j.spread))::float8 END AS lag,
       r.error, r.output, r.fencing_token,
       coalesce(r.earlier_attempts, '[]'::jsonb) AS earlier_attempts, r.attempt_ended_at, r.kind,
       -- the definition's revision when the run started: the job's last audit-trail row
       -- before it (revision 1 before any recorded change)
       coalesce((SELECT h.revision FROM pgpulse_job_history h
                 WHERE h.job_id = r.job_id
                   AND h.at <= coalesce(r.started_at, r.finished_at, r.scheduled_for)
                 ORDER BY h.id DESC
                 LIMIT 1), 1) AS revision
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
-- silent_seconds: seconds since its last heartbeat, by the database's clock. A node that beats
-- but whose last claim step failed (claim_error) is 'unhealthy', and not alive: its claims, not
-- its heartbeat, are what fire jobs.
SELECT n.node_id, n.hostname, n.pid,
       CASE WHEN NOT h.fresh AND n.state <> 'stopped' THEN 'lost'
            WHEN n.state = 'alive' AND n.claim_error IS NOT NULL THEN 'unhealthy'
            ELSE n.state END AS state,
       n.started_at, n.last_heartbeat,
       h.fresh AND n.state = 'alive' AND n.claim_error IS NULL AS alive,
       n.last_claim_at, n.claim_error,
       extract(epoch FROM now() - n.last_heartbeat)::float8 AS silent_seconds,
       CASE WHEN h.fresh AND n.state <> 'stopped' THEN n.shards ELSE '{}' END AS shards,
       CASE WHEN h.fresh AND n.state <> 'stopped' THEN n.running ELSE 0 END AS running,
       n.slots, coalesce(n.ttl, %(ttl)s) AS ttl, n.handlers, n.shell,
       (SELECT c.shard_count FROM pgpulse_cluster AS c) AS shard_count,
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
-- Jobs by state, of one tenant or all, and how late the most overdue idle job is (seconds);
-- `unroutable`: the idle jobs whose handler no live node advertises, by handler, as
-- [{"handler": h, "jobs": n, "due": d}] (they wait, due, for a node that has it).
-- failed: jobs that cannot be scheduled; failing: jobs whose last run failed or was fenced;
-- pausing: jobs whose pause waits for the end of their run (pause_job).
-- running_on_lost: running jobs whose node is not alive (killed, partitioned); their leases run
-- out by lost_leases_until (the latest of them), and the sweeper then returns them.
WITH live_nodes AS (
    SELECT n.node_id
    FROM pgpulse_nodes n
    WHERE n.state = 'alive'
      AND n.last_heartbeat > now() - make_interval(secs => coalesce(n.ttl, %(ttl)s::float8))
), live AS (
    SELECT DISTINCT unnest(n.handlers) AS handler
    FROM pgpulse_nodes n
    WHERE n.state = 'alive'
      AND n.last_heartbeat > now() - make_interval(secs => coalesce(n.ttl, %(ttl)s::float8))
), counts AS (
    SELECT count(*) FILTER (WHERE status = 'idle' AND next_run_at <= now()) AS due,
           count(*) FILTER (WHERE status = 'running') AS running,
           count(*) FILTER (WHERE status = 'running'
                              AND locked_by NOT IN (SELECT node_id FROM live_nodes))
               AS running_on_lost,
           max(lease_expires_at) FILTER (WHERE status = 'running'
                                           AND locked_by NOT IN (SELECT node_id FROM live_nodes))
               AS lost_leases_until,
           count(*) FILTER (WHERE status = 'paused') AS paused,
           count(*) FILTER (WHERE pause_requested) AS pausing,
           count(*) FILTER (WHERE status = 'failed') AS failed,
           count(*) FILTER (WHERE status = 'completed') AS completed,
           count(*) FILTER (WHERE last_outcome IN ('failed', 'fenced')) AS failing,
           count(*) AS total,
           extract(epoch FROM now() - min(next_run_at) FILTER (WHERE status = 'idle'
                                                               AND next_run_at <= now()))::float8
               AS max_lag
    FROM pgpulse_jobs
    WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
), unroutable AS (
    SELECT j.handler, count(*) AS jobs, count(*) FILTER (WHERE j.next_run_at <= now()) AS due
    FROM pgpulse_jobs j
    WHERE j.status = 'idle'
      AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s)
      AND j.handler NOT IN (SELECT handler FROM live)
    GROUP BY j.handler
)
SELECT counts.*,
       (SELECT coalesce(json_agg(json_build_object('handler', u.handler, 'jobs', u.jobs,
                                                   'due', u.due)
                                 ORDER BY u.handler), '[]')
        FROM unroutable u) AS unroutable,
       -- the most overdue idle job (max_lag's), by the due index: tenant, name, handler
       (SELECT json_build_object('tenant', j.tenant, 'name', j.name, 'handler', j.handler)
        FROM pgpulse_jobs j
        WHERE j.status = 'idle' AND j.next_run_at <= now()
          AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s)
        ORDER BY j.next_run_at
        LIMIT 1) AS most_overdue
FROM counts;

-- name: known_handlers
SELECT DISTINCT unnest(handlers) AS handler FROM pgpulse_nodes;

-- name: put_calendar
-- Create or replace calendar (%(tenant)s, %(name)s). Jobs that name it see the new dates from
-- their next claim.
INSERT INTO pgpulse_calendars AS c (tenant, name, dates, country, subdivision)
VALUES (%(tenant)s, %(name)s, %(dates)s::date[], %(country)s, %(subdivision)s)
ON CONFLICT (tenant, name) DO UPDATE
SET dates = excluded.dates,
    country = excluded.country,
    subdivision = excluded.subdivision,
    updated_at = now()
RETURNING (c.created_at = c.updated_at) AS created;

-- name: list_calendars
-- Calendars of one tenant or all, with the jobs that name them.
SELECT c.tenant, c.name, c.dates, c.country, c.subdivision, c.created_at, c.updated_at,
       ARRAY(SELECT j.name FROM pgpulse_jobs j
             WHERE j.tenant = c.tenant AND c.name = ANY(j.calendars)
             ORDER BY j.name) AS jobs
FROM pgpulse_calendars c
WHERE (%(tenant)s::text IS NULL OR c.tenant = %(tenant)s)
ORDER BY c.tenant, c.name;

-- name: delete_calendar
-- Delete calendar (%(tenant)s, %(name)s) unless a job names it. The calendar row is locked
-- first, so a job that names it cannot be written in between (upserts lock it FOR SHARE).
WITH target AS (
    SELECT c.tenant, c.name
    FROM pgpulse_calendars c
    WHERE c.tenant = %(tenant)s AND c.name = %(name)s
    FOR UPDATE
), users AS (
    SELECT j.name
    FROM pgpulse_jobs j, target
    WHERE j.tenant = target.tenant AND target.name = ANY(j.calendars)
), deleted AS (
    DELETE FROM pgpulse_calendars c
    USING target
    WHERE (c.tenant, c.name) = (target.tenant, target.name)
      AND NOT EXISTS (SELECT 1 FROM users)
    RETURNING c.name
)
SELECT (SELECT count(*) FROM target) AS found, (SELECT count(*) FROM deleted) AS deleted,
       ARRAY(SELECT name FROM users ORDER BY name LIMIT 5) AS jobs;

-- name: lock_calendar
-- Lock calendar (%(tenant)s, %(name)s) until the end of the transaction, before delete_calendar
-- reads which jobs name it: that statement's snapshot then sees every job written by an upsert
-- that held the calendar FOR SHARE.
SELECT c.name
FROM pgpulse_calendars c
WHERE c.tenant = %(tenant)s AND c.name = %(name)s
FOR UPDATE;

-- name: job_handlers
-- The handler names stored jobs use (claim_due without handlers: tools and tests).
SELECT DISTINCT j.handler FROM pgpulse_jobs j ORDER BY j.handler;

-- name: declare_code
-- What an app's code declares, written by each of its nodes at start (the last one wins).
INSERT INTO pgpulse_code_declarations (source, tenant, names, node_id, declared_at)
VALUES (%(source)s, %(tenant)s, %(names)s, %(node)s, now())
ON CONFLICT (source) DO UPDATE
SET tenant = excluded.tenant, names = excluded.names, node_id = excluded.node_id,
    declared_at = excluded.declared_at;

-- name: stale_code_jobs
-- Jobs of a code source (`code:<app>`) that the app's code, as its last node to start declared
-- it, no longer declares (of %(tenant)s, or all tenants), and whose handler no live node has:
-- "declared by code no longer running". During a rolling deploy a node of the old code still
-- runs it, so it is not stale yet (a node row without a time-to-live is judged by 10 s).
SELECT j.id, j.tenant, j.name, j.source, d.node_id, d.declared_at
FROM pgpulse_jobs j
JOIN pgpulse_code_declarations d ON d.source = j.source
WHERE j.source LIKE 'code:%%'
  AND NOT (j.tenant = d.tenant AND j.name = ANY(d.names))
  AND NOT EXISTS (
      SELECT 1
      FROM pgpulse_nodes AS p
      WHERE j.handler = ANY(p.handlers)
        AND p.state = 'alive'
        AND p.last_heartbeat > now() - make_interval(secs => coalesce(p.ttl, 10))
  )
  AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s)
ORDER BY j.tenant, j.name;
