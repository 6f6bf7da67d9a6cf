-- The statements of extra occurrences (pgpulse_occurrences: triggers with a payload, backfills on
-- request, occurrences forked off the job row under overlap replace/allow), loaded into
-- pgpulse.sql.QUERIES beside queries.sql. docs/states.md ("Extra occurrences") is the design.
-- Clock rule as in queries.sql: %(now)s is NULL in production (the database's now()).
-- Epochs as in queries.sql (the claim step, invariant 9): clock.epoch is (timeline - 1) * 2^48;
-- an occurrence's id (its run row's) is the sequence's value + the epoch, and a claim's token is
-- greatest(token, epoch) + 1, so nothing handed out before a lost-WAL failover is handed out
-- again. Run rows keep every attempt (migration 0004): a later attempt written over an earlier
-- one first appends it to earlier_attempts; a 'retrying' end is recorded in attempt_ended_at.

-- name: finish_occurrences
-- End a batch of attempts of extra occurrences (%(outcomes)s: a JSON array of {id, token,
-- outcome, retry_in, error, output}), fenced: an element changes nothing unless its occurrence
-- still runs under its token. A final outcome deletes the occurrence; 'retrying' makes it
-- pending again, due retry_in seconds from now. Either way its history row (id = the
-- occurrence's id) takes the attempt, keeping the earlier ones, and its batch's count of
-- leases goes down by one. Locks the occurrences it ends and their batch rows. Returns the
-- (id, fencing_token) of each element written.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), input AS (
    SELECT * FROM json_to_recordset(%(outcomes)s::json) AS i (
        id bigint, token bigint, outcome text, retry_in float8, error text, output text)
), ended AS (
    DELETE FROM pgpulse_occurrences AS o
    USING input AS i
    WHERE o.id = ANY(ARRAY(SELECT id FROM input)) AND o.id = i.id
      AND o.fencing_token = i.token AND o.lease_expires_at IS NOT NULL
      AND i.outcome <> 'retrying'
    RETURNING o.id, o.job_id, o.kind, o.scheduled_for, o.batch_id, o.attempt, o.locked_by,
              o.fencing_token, o.claimed_at, i.outcome, i.error, i.output
), retried AS (
    UPDATE pgpulse_occurrences AS o
    SET lease_expires_at = NULL, next_run_at = clock.now + make_interval(secs => i.retry_in)
    FROM input AS i, clock
    WHERE o.id = ANY(ARRAY(SELECT id FROM input)) AND o.id = i.id
      AND o.fencing_token = i.token AND o.lease_expires_at IS NOT NULL
      AND i.outcome = 'retrying'
    RETURNING o.id, o.job_id, o.kind, o.scheduled_for, o.batch_id, o.attempt, o.locked_by,
              o.fencing_token, o.claimed_at, i.outcome, i.error, i.output
), released AS (
    SELECT * FROM ended UNION ALL SELECT * FROM retried
), run AS (
    INSERT INTO pgpulse_runs AS r (
        id, job_id, scheduled_for, attempts, outcome, node_id, fencing_token, started_at,
        finished_at, error, output, kind, batch_id, attempt_ended_at)
    OVERRIDING SYSTEM VALUE
    SELECT e.id, e.job_id, e.scheduled_for, e.attempt, e.outcome, e.locked_by, e.fencing_token,
           e.claimed_at, CASE WHEN e.outcome <> 'retrying' THEN clock.now END,
           e.error, e.output, e.kind, e.batch_id,
           CASE WHEN e.outcome = 'retrying' THEN clock.now END
    FROM released AS e CROSS JOIN clock
    ON CONFLICT (id, scheduled_for) DO UPDATE
    {attempt_written_over}
    RETURNING 1
), counted AS (
    -- and the batch's last success (a downstream's context: docs/chains.md)
    UPDATE pgpulse_batches AS b
    SET running = b.running - d.n,
        last_success_at = CASE WHEN d.ok IS NULL THEN b.last_success_at ELSE clock.now END,
        last_success_scheduled_for = coalesce(d.ok, b.last_success_scheduled_for)
    FROM (SELECT batch_id, count(*)::int AS n,
                 max(scheduled_for) FILTER (WHERE outcome = 'succeeded') AS ok
          FROM released GROUP BY batch_id) AS d, clock
    WHERE b.id = d.batch_id
    RETURNING 1
)
SELECT id, fencing_token FROM released;

-- name: claim_occurrences
-- Claim up to %(limit)s due extra occurrences for node %(node)s along its routes (the i-th
-- handler of %(route_handlers)s in the shards of the i-th array literal of %(route_shards)s;
-- an occurrence whose handler is on no route is never read), oldest due first, within each
-- batch's bound. Pending occurrences of jobs that are idle or running, not of a batch full
-- now, are locked SKIP LOCKED, then their batch rows SKIP LOCKED (READ COMMITTED locks the
-- newest version: the newest count of leases, which a finish earlier in the same transaction
-- has already lowered); of each batch at most max_concurrency - running are claimed, in its
-- order; and no more of a concurrency key than its limit has room for, exactly across nodes, as
-- claim_jobs bounds them ({key_open}, {key_room}, {key_allows}; in due order: priority orders job
-- rows only). Each gets attempt + 1, a lease and a new token (greatest(token, epoch) + 1: never
-- one an older timeline handed out, invariant 9); its batch's count goes up. Returns one row per
-- claimed occurrence with its job's definition (ClaimedJob's fields, by name).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now,
           {epoch} AS epoch
), route AS (
    SELECT r.handler, r.shards::smallint[] AS shards
    FROM unnest(%(route_handlers)s::text[], %(route_shards)s::text[]) AS r (handler, shards)
), cand AS (
    SELECT o.id, o.batch_id, o.next_run_at, o.position, j.tenant, j.concurrency_key, 0 AS rank
    FROM pgpulse_occurrences o
    JOIN pgpulse_jobs j ON j.id = o.job_id
    WHERE o.lease_expires_at IS NULL
      AND o.next_run_at <= coalesce(%(now)s::timestamptz, now())
      AND j.status IN ('idle', 'running') AND NOT j.pause_requested
      AND EXISTS (SELECT 1 FROM route r
                  WHERE r.handler = j.handler AND {shard_of_occurrence} = ANY(r.shards))
      AND NOT EXISTS (SELECT 1 FROM pgpulse_batches b
                      WHERE b.id = o.batch_id AND b.running >= b.max_concurrency)
      AND {key_open}
    ORDER BY o.next_run_at, o.position
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
), batch AS (
    SELECT b.id, b.max_concurrency, b.running, b.last_success_at, b.last_success_scheduled_for
    FROM pgpulse_batches b
    WHERE b.id = ANY(ARRAY(SELECT batch_id FROM cand))
    FOR UPDATE OF b SKIP LOCKED
), {key_room}, picked AS (
    SELECT c.id, c.batch_id, c.tenant, c.concurrency_key
    FROM (SELECT cand.*,
                 row_number() OVER (PARTITION BY batch_id ORDER BY next_run_at, position) AS bn
          FROM cand) c
    JOIN batch b ON b.id = c.batch_id
    WHERE (b.max_concurrency IS NULL OR c.bn <= b.max_concurrency - b.running)
      AND {key_allows}
), {key_bump}, claimed AS (
    UPDATE pgpulse_occurrences o
    SET attempt = o.attempt + 1, fencing_token = greatest(o.fencing_token, clock.epoch) + 1,
        locked_by = %(node)s, lease_expires_at = clock.now + make_interval(secs => %(lease)s),
        claimed_at = clock.now
    FROM clock
    WHERE o.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING o.id, o.job_id, o.kind, o.scheduled_for, o.payload, o.batch_id, o.attempt,
              o.fencing_token, o.interruptions, clock.now AS db_now, o.upstream_runs,
              o.data_interval_start
), counted AS (
    UPDATE pgpulse_batches b
    SET running = b.running + d.n
    FROM (SELECT batch_id, count(*)::int AS n FROM claimed GROUP BY batch_id) d
    WHERE b.id = d.batch_id
    RETURNING 1
)
-- the job's limits were judged on the job row before an occurrence was made: an extra
-- occurrence has none of its own (docs/states.md, "Extra occurrences and run control")
SELECT j.id, j.tenant, j.name, j.schedule, j.timezone, j.handler,
       coalesce(c.payload, j.payload) AS payload, j.catch_up, j.backfill_limit,
       j.misfire_grace, j.max_attempts, j.retry_backoff, j.timeout, j.anchor_at, c.scheduled_for,
       c.attempt, c.fencing_token, c.id AS run_id, c.db_now,
       CASE WHEN c.kind = 'scheduled' THEN j.spread ELSE 0 END AS spread,
       j.overlap, j.max_concurrency, c.interruptions, c.id AS occurrence, c.kind,
       j.has_downstreams AS downstreams, c.upstream_runs, c.data_interval_start,
       j.last_success_at, j.last_success_scheduled_for,
       -- a downstream's last success: its after batch's, or its job row's if later (the
       -- store picks: pgpulse.db.claims._claimed)
       b.last_success_at AS batch_success_at, b.last_success_scheduled_for AS batch_success_for
FROM claimed c
JOIN pgpulse_jobs j ON j.id = c.job_id
JOIN batch b ON b.id = c.batch_id
ORDER BY c.scheduled_for;

-- name: next_occurrence_due
-- The clock, and the earliest due instant of a pending extra occurrence along the routes of
-- %(route_handlers)s / %(route_shards)s still to come (NULL if none): when the claim of extra
-- occurrences next has work. One probe of pgpulse_occurrences_due per route; locks nothing.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), route AS (
    SELECT r.handler, r.shards::smallint[] AS shards
    FROM unnest(%(route_handlers)s::text[], %(route_shards)s::text[]) AS r (handler, shards)
)
SELECT clock.now AS clock_now, (
    SELECT o.next_run_at
    FROM pgpulse_occurrences AS o
    JOIN pgpulse_jobs AS j ON j.id = o.job_id
    JOIN route AS r ON r.handler = j.handler AND {shard_of_occurrence} = ANY(r.shards)
    WHERE o.lease_expires_at IS NULL AND o.next_run_at > clock.now
    ORDER BY o.next_run_at
    LIMIT 1
) AS next_due
FROM clock;

-- name: hand_back_occurrences
-- A stopping node hands back the extra occurrences it could not finish, fenced per claim: each is
-- pending and due at once, and its batch's count goes down. One whose handler had started
-- (%(started)s) counts as an attempt, and as an interruption (interruptions + 1), not a failure:
-- its history row is written 'retrying' with %(reason)s; one that never started is not counted
-- (attempt - 1) and writes no row.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
),
held AS (
    SELECT *
    FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(started)s::bool[])
         AS h(id, token, started)
),
back AS (
    UPDATE pgpulse_occurrences AS o
    SET lease_expires_at = NULL,
        next_run_at = clock.now,
        attempt = CASE WHEN held.started THEN o.attempt ELSE greatest(o.attempt - 1, 0) END,
        interruptions = o.interruptions + CASE WHEN held.started THEN 1 ELSE 0 END
    FROM clock, held
    WHERE o.id = held.id
      AND o.fencing_token = held.token
      AND o.lease_expires_at IS NOT NULL
    RETURNING o.id, o.job_id, o.kind, o.scheduled_for, o.batch_id, o.attempt, o.locked_by,
              o.fencing_token, o.claimed_at, held.started
),
run AS (
    INSERT INTO pgpulse_runs AS r (
        id, job_id, scheduled_for, attempts, outcome, node_id, fencing_token, started_at,
        error, kind, batch_id, attempt_ended_at
    )
    OVERRIDING SYSTEM VALUE
    SELECT b.id, b.job_id, b.scheduled_for, b.attempt, 'retrying', b.locked_by,
           b.fencing_token, b.claimed_at, %(reason)s, b.kind, b.batch_id, clock.now
    FROM back AS b
    CROSS JOIN clock
    WHERE b.started
    ON CONFLICT (id, scheduled_for) DO UPDATE
    {attempt_written_over}
    RETURNING 1
),
counted AS (
    UPDATE pgpulse_batches AS b
    SET running = b.running - d.n
    FROM (SELECT batch_id, count(*)::int AS n FROM back GROUP BY batch_id) AS d
    WHERE b.id = d.batch_id
    RETURNING 1
)
SELECT back.id, back.started
FROM back;

-- name: cancel_replaced
-- Under overlap replace, sent before fork_occurrence in its transaction: the job's other
-- scheduled occurrences, running or pending, are cancelled. Their history rows say 'cancelled'
-- ("replaced by the occurrence at" the claimed one), their rows are deleted (a holder's next
-- renewal is refused and it cancels its attempt), and the overlap batch's count of leases loses
-- those that held one. Fenced by the job row's claim (%(job_id)s, %(token)s), whose row it locks
-- first, so that fork_occurrence, next, finds the claim held. Returns how many it cancelled.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), old AS (
    SELECT j.id, j.scheduled_for
    FROM pgpulse_jobs AS j
    WHERE j.id = %(job_id)s AND j.fencing_token = %(token)s AND j.lease_expires_at IS NOT NULL
      AND NOT j.pause_requested  -- a pause requested meanwhile: no newer occurrence starts
    FOR NO KEY UPDATE
), cancelled AS (
    DELETE FROM pgpulse_occurrences AS o
    USING old
    WHERE o.job_id = old.id
      AND o.kind = 'scheduled'
    RETURNING o.id, o.job_id, o.kind, o.scheduled_for, o.batch_id, o.attempt, o.locked_by,
              o.fencing_token, o.claimed_at, o.lease_expires_at IS NOT NULL AS held
),
cancelled_run AS (
    INSERT INTO pgpulse_runs AS r (
        id, job_id, scheduled_for, attempts, outcome, node_id, fencing_token, started_at,
        finished_at, error, kind, batch_id
    )
    OVERRIDING SYSTEM VALUE
    -- an occurrence pending again after a lost attempt keeps that attempt in its row: the
    -- cancelled one (attempt + 1 if it held a lease) is appended after it
    SELECT c.id, c.job_id, c.scheduled_for, c.attempt, 'cancelled', c.locked_by,
           c.fencing_token, c.claimed_at, clock.now,
           -- the instant as Pulse prints instants: no fraction when it has none
           'replaced by the occurrence at '
               || rtrim(rtrim(to_char(old.scheduled_for AT TIME ZONE 'UTC',
                                      'YYYY-MM-DD"T"HH24:MI:SS.US'), '0'), '.') || 'Z',
           c.kind, c.batch_id
    FROM cancelled AS c, old, clock
    ON CONFLICT (id, scheduled_for) DO UPDATE
    {attempt_written_over}
    RETURNING 1
), counted AS (
    UPDATE pgpulse_batches AS b
    SET running = b.running - (SELECT count(*) FROM cancelled WHERE cancelled.held)::int
    FROM old
    WHERE b.job_id = old.id AND b.kind = 'overlap'
    RETURNING 1
)
SELECT count(*) AS cancelled FROM cancelled;

-- name: fork_occurrence
-- Under overlap replace or allow, a claimed job row whose occurrence is to run does not run it:
-- this statement, fenced by the job row's token, moves the job row to its next occurrence
-- (%(scheduled_for)s, the planner's advance; its skipped occurrences, if any, get one summary
-- row as record_skips_and_auto_pauses writes them) and makes the claimed occurrence a pending
-- extra occurrence (kind 'scheduled') of the job's overlap batch, due at once, with the job row's run
-- id and the attempts (and interruptions) it already spent on it. Under replace,
-- cancel_replaced goes first in the same transaction. Returns the new occurrence's id, or no
-- row when the job row's claim was lost.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now,
           {epoch} AS epoch
),
old AS (
    SELECT j.id, j.scheduled_for, j.attempt, j.interruptions, j.run_id, j.max_concurrency,
           j.shard_id, j.pause_requested
    FROM pgpulse_jobs AS j
    WHERE j.id = %(job_id)s
      AND j.fencing_token = %(token)s
      AND j.lease_expires_at IS NOT NULL
),
job AS (
    UPDATE pgpulse_jobs AS j
    -- a pause requested while the job row was claimed (pause_job) takes effect here: the job
    -- row is paused, and the forked occurrence waits for the resume
    SET status = CASE WHEN old.pause_requested THEN 'paused' ELSE 'idle' END,
        pause_requested = false,
        scheduled_for = %(scheduled_for)s,
        next_run_at = %(scheduled_for)s + pgpulse_spread_offset(j.id, j.spread),
        attempt = 0,
        interruptions = 0,
        run_id = NULL,
        locked_by = NULL,
        lease_expires_at = NULL,
        updated_at = clock.now
    FROM old, clock
    WHERE j.id = old.id
    RETURNING j.id
),
batch AS (
    INSERT INTO pgpulse_batches AS b (job_id, kind, max_concurrency)
    SELECT job.id, 'overlap', coalesce(old.max_concurrency, 1)
    FROM job, old
    ON CONFLICT (job_id) WHERE kind = 'overlap' DO UPDATE
    SET max_concurrency = excluded.max_concurrency
    RETURNING b.id
),
forked AS (
    INSERT INTO pgpulse_occurrences (
        id, job_id, kind, scheduled_for, batch_id, next_run_at, attempt, interruptions
    )
    SELECT coalesce(old.run_id, nextval('pgpulse_runs_id_seq') + clock.epoch),
           old.id, 'scheduled',
           old.scheduled_for, batch.id, clock.now, greatest(old.attempt - 1, 0),
           old.interruptions
    FROM old, batch, clock
    RETURNING id
),
skipped AS (
    INSERT INTO pgpulse_runs (
        id, job_id, scheduled_for, attempts, outcome, error, finished_at, occurrences,
        last_scheduled_for
    )
    OVERRIDING SYSTEM VALUE
    SELECT nextval('pgpulse_runs_id_seq') + clock.epoch,
           job.id, %(skip_from)s::timestamptz, 0, 'skipped', %(skip_reason)s, clock.now,
           %(skips)s, %(skip_to)s::timestamptz
    FROM job, clock
    WHERE %(skips)s > 0
    ON CONFLICT (job_id, scheduled_for) WHERE kind = 'scheduled' DO NOTHING
    RETURNING 1
)
SELECT forked.id, pg_notify('pgpulse_wakeup', old.id::text)
FROM forked, old;

-- name: cancel_running_occurrences
-- Cancel the extra occurrences of job %(job_id)s that run now (a pause that cancels the current
-- run: pause_cancelling), as fork_occurrence's replace cancels one: their rows are deleted (a
-- holder's next renewal is refused and it cancels its attempt; its late writes change nothing),
-- their history rows say 'cancelled' with %(error)s (an earlier attempt appended to
-- earlier_attempts), and their batches' counts of leases go down. Pending ones stay, to run
-- after a resume. Returns each cancelled occurrence (its id is its run's).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
),
cancelled AS (
    DELETE FROM pgpulse_occurrences AS o
    WHERE o.job_id = %(job_id)s
      AND o.lease_expires_at IS NOT NULL
    RETURNING o.id, o.job_id, o.kind, o.scheduled_for, o.batch_id, o.attempt, o.locked_by,
              o.fencing_token, o.claimed_at
),
run AS (
    INSERT INTO pgpulse_runs AS r (
        id, job_id, scheduled_for, attempts, outcome, node_id, fencing_token, started_at,
        finished_at, error, kind, batch_id
    )
    OVERRIDING SYSTEM VALUE
    SELECT c.id, c.job_id, c.scheduled_for, c.attempt, 'cancelled', c.locked_by,
           c.fencing_token, c.claimed_at, clock.now, %(error)s, c.kind, c.batch_id
    FROM cancelled AS c
    CROSS JOIN clock
    ON CONFLICT (id, scheduled_for) DO UPDATE
    {attempt_written_over}
    RETURNING 1
),
counted AS (
    UPDATE pgpulse_batches AS b
    SET running = b.running - d.n
    FROM (SELECT batch_id, count(*)::int AS n FROM cancelled GROUP BY batch_id) AS d
    WHERE b.id = d.batch_id
    RETURNING 1
)
SELECT c.id AS run_id, c.kind, c.scheduled_for, c.locked_by AS node_id
FROM cancelled AS c
ORDER BY c.id;

-- name: insert_trigger
-- Run now, with a payload: one extra occurrence of job (%(tenant)s, %(name)s) at the database's
-- now, kind 'trigger', with %(payload)s (NULL: the job's own), in a batch of its own (no bound),
-- due at once; its shard is woken; recorded in the audit trail (action 'trigger', the payload
-- and the run id as its changes) in the same statement. No row when there is no such job.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now,
           {epoch} AS epoch
),
job AS (
    SELECT j.id, j.shard_id, j.status, j.tenant, j.name, j.revision
    FROM pgpulse_jobs AS j
    WHERE j.id = (
        SELECT n.job_id
        FROM pgpulse_job_names AS n
        WHERE n.tenant = %(tenant)s
          AND n.name = %(name)s
    )
),
batch AS (
    INSERT INTO pgpulse_batches (job_id, kind)
    SELECT job.id, 'trigger'
    FROM job
    WHERE job.status IN ('idle', 'running')
    RETURNING id, job_id
),
occurrence AS (
    INSERT INTO pgpulse_occurrences (id, job_id, kind, scheduled_for, payload, batch_id,
                                     next_run_at)
    SELECT nextval('pgpulse_runs_id_seq') + clock.epoch,
           batch.job_id, 'trigger', clock.now, %(payload)s::jsonb,
           batch.id, clock.now
    FROM batch, clock
    RETURNING id, scheduled_for
),
audit AS (
    INSERT INTO pgpulse_job_history (job_id, tenant, name, at, action, source, actor, revision,
                                     changes)
    SELECT job.id, job.tenant, job.name, clock.now, 'trigger', %(source)s, %(actor)s,
           job.revision,
           jsonb_build_object('payload', jsonb_build_array(NULL, %(payload)s::jsonb),
                              'run_id', jsonb_build_array(NULL, occurrence.id))
    FROM job, occurrence, clock
)
SELECT job.id AS job_id, job.status, occurrence.id, occurrence.scheduled_for,
       CASE WHEN occurrence.id IS NOT NULL
            THEN pg_notify('pgpulse_wakeup', job.id::text) END AS woken
FROM job
LEFT JOIN occurrence ON true;

-- name: backfill_history
-- What the history holds for job %(job_id)s's scheduled occurrences in [%(from)s, %(to)s]: one row
-- per run of an occurrence of the schedule, the schedule's own (kind 'scheduled', a fork's too)
-- and each earlier backfill's (kind 'backfill'), and each skipped summary that overlaps the range
-- (scheduled_for through last_scheduled_for), so a backfill can tell succeeded, failed and
-- skipped occurrences from those never run. In id order within an instant: a run's id is drawn
-- when its occurrence is first claimed (the schedule's) or made (a backfill's), so the last row of
-- an instant is its newest run.
SELECT r.scheduled_for,
       coalesce(r.last_scheduled_for, r.scheduled_for) AS last_scheduled_for,
       r.outcome,
       r.occurrences,
       r.id
FROM pgpulse_runs AS r
WHERE r.job_id = %(job_id)s
  AND r.kind = 'scheduled'
  AND r.scheduled_for <= %(to)s
  AND coalesce(r.last_scheduled_for, r.scheduled_for) >= %(from)s
UNION ALL
SELECT r.scheduled_for,
       r.scheduled_for AS last_scheduled_for,
       r.outcome,
       r.occurrences,
       r.id
FROM pgpulse_runs AS r
WHERE r.job_id = %(job_id)s
  AND r.kind = 'backfill'
  AND r.scheduled_for BETWEEN %(from)s AND %(to)s
ORDER BY scheduled_for, id;

-- name: insert_backfill
-- A backfill on request: one batch (kind 'backfill', bound %(max_concurrency)s) of job
-- %(job_id)s, and one pending extra occurrence per instant of %(instants)s, in that order
-- (position), due at once; the job's shard is woken; recorded in the audit trail (action
-- 'backfill', %(request)s as its changes: the range, the selection, the bound, how many) in the
-- same statement. Returns the batch's id and how many.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now,
           {epoch} AS epoch
),
batch AS (
    INSERT INTO pgpulse_batches (job_id, kind, max_concurrency)
    SELECT j.id, 'backfill', %(max_concurrency)s
    FROM pgpulse_jobs AS j
    WHERE j.id = %(job_id)s
    RETURNING id, job_id
),
audit AS (
    INSERT INTO pgpulse_job_history (job_id, tenant, name, at, action, source, actor, revision,
                                     changes)
    SELECT j.id, j.tenant, j.name, clock.now, 'backfill', %(source)s, %(actor)s, j.revision,
           %(request)s::jsonb || jsonb_build_object('batch_id', jsonb_build_array(NULL, batch.id))
    FROM batch
    JOIN pgpulse_jobs AS j ON j.id = batch.job_id
    CROSS JOIN clock
),
occurrence AS (
    INSERT INTO pgpulse_occurrences (id, job_id, kind, scheduled_for, batch_id, position,
                                     next_run_at)
    SELECT nextval('pgpulse_runs_id_seq') + clock.epoch,
           batch.job_id, 'backfill', w.instant, batch.id,
           w.position::int, clock.now
    FROM batch, clock, unnest(%(instants)s::timestamptz[]) WITH ORDINALITY AS w(instant, position)
    RETURNING 1
)
SELECT batch.id, (SELECT count(*) FROM occurrence)::int AS occurrences,
       pg_notify('pgpulse_wakeup', batch.job_id::text)
FROM batch;

-- name: backfill_queued
-- The instants in [%(from)s, %(to)s] that an earlier backfill of job %(job_id)s, or a fork of its
-- schedule (overlap replace/allow), has still to run (pending or running): a new request does
-- not queue them twice.
SELECT o.scheduled_for
FROM pgpulse_occurrences AS o
WHERE o.job_id = %(job_id)s
  AND o.kind IN ('backfill', 'scheduled')
  AND o.scheduled_for BETWEEN %(from)s AND %(to)s;
