-- Statements of the fault-injection harness (pgpulse chaos), as named blocks.
-- The harness creates its tables itself in the fresh database of a run (they are evidence, not
-- part of Pulse's schema, so no migration). Instants are the database's clock_timestamp(): the
-- one clock every node shares (docs/design.md, invariant 1).

-- name: create_history
-- chaos_history: one row per handler execution, written by the handler itself (start, then end).
--   uid: the execution's own id, also in the node's journal file (workload.py), which keeps what
--   a failover that lost WAL takes from this table. run_id: the claim's run id.
--   result: 'applied' (its fenced effect was written), 'fenced' (the guard refused the effect),
--   'failed' (the handler failed on purpose, before any effect); NULL = never ended (cancelled,
--   killed). lease_ok_*: whether the execution's token still held an unexpired lease on the job
--   at that instant, as the database saw it (an observation; the guard does not read it).
-- chaos_fence: the largest fencing token the "external resource" has seen per fence key: the
--   job id for a job whose occurrences run one at a time on its row (overlap forbid), minus the
--   run id for an occurrence with a lease of its own (overlap allow), whose token grows over the
--   claims of that occurrence only (README: key such a guard by run id).
-- occurrence: the handler's ctx.kind ('scheduled', 'trigger', 'backfill'): an extra occurrence
--   (trigger, backfill) is identified by its run id, as its fence key is (a backfill re-runs an
--   instant the schedule already ran).
-- chaos_effects: the side effect, keyed by occurrence ((job, scheduled_for) and, for an extra
--   occurrence, its run id in `extra`; 0 for the schedule's); applied counts committed writes.
-- chaos_run_log: the engine's own writes, recorded by triggers, so the checker can tell an
--   interrupted attempt from a recorded success: every insert/update of pgpulse_runs (outcomes,
--   reaps), and from pgpulse_jobs each claim (a new fencing token: 'running') and each end of
--   a claim (the lease cleared: 'ended', by an outcome, a reap or a release). A claim writes
--   no pgpulse_runs row. Observation only: a harness database, never a
--   Pulse migration.
CREATE TABLE chaos_history (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uid               text NOT NULL,
    job_id            bigint NOT NULL,
    scheduled_for     timestamptz NOT NULL,
    attempt           integer NOT NULL,
    token             bigint NOT NULL,
    run_id            bigint NOT NULL,
    node_id           text NOT NULL,
    kind              text NOT NULL,
    started_at        timestamptz NOT NULL,
    ended_at          timestamptz,
    result            text CHECK (result IN ('applied', 'fenced', 'failed')),
    lease_ok_at_start boolean NOT NULL,
    lease_ok_at_end   boolean,
    planned           double precision, -- seconds it works before its effect; NULL: it fails
    occurrence        text NOT NULL DEFAULT 'scheduled'
);
CREATE INDEX chaos_history_job ON chaos_history (job_id, started_at);
CREATE UNIQUE INDEX chaos_history_uid ON chaos_history (uid);
CREATE TABLE chaos_fence (
    job_id    bigint PRIMARY KEY,
    max_token bigint NOT NULL
);
CREATE TABLE chaos_effects (
    job_id        bigint NOT NULL,
    scheduled_for timestamptz NOT NULL,
    extra         bigint NOT NULL,
    token         bigint NOT NULL,
    node_id       text NOT NULL,
    applied       integer NOT NULL,
    first_at      timestamptz NOT NULL,
    last_at       timestamptz NOT NULL,
    PRIMARY KEY (job_id, scheduled_for, extra)
);
CREATE TABLE chaos_run_log (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        bigint NOT NULL,
    scheduled_for timestamptz NOT NULL,
    outcome       text NOT NULL,
    attempts      integer NOT NULL,
    token         bigint,
    node_id       text,
    error         text,
    at            timestamptz NOT NULL,
    run_id        bigint,
    kind          text NOT NULL DEFAULT 'scheduled'
);
CREATE FUNCTION chaos_log_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_run_log (job_id, scheduled_for, outcome, attempts, token, node_id, error, at,
                               run_id, kind)
    VALUES (NEW.job_id, NEW.scheduled_for, NEW.outcome, NEW.attempts, NEW.fencing_token,
            NEW.node_id, NEW.error, clock_timestamp(), NEW.id, NEW.kind);
    RETURN NULL;
END
$$;
CREATE TRIGGER chaos_log_run AFTER INSERT OR UPDATE ON pgpulse_runs
FOR EACH ROW EXECUTE FUNCTION chaos_log_run();
CREATE FUNCTION chaos_log_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.fencing_token <> OLD.fencing_token THEN
        INSERT INTO chaos_run_log (job_id, scheduled_for, outcome, attempts, token, node_id, at,
                                   run_id)
        VALUES (NEW.id, NEW.scheduled_for, 'running', NEW.attempt, NEW.fencing_token,
                NEW.locked_by, clock_timestamp(), NEW.run_id);
    ELSIF OLD.lease_expires_at IS NOT NULL AND NEW.lease_expires_at IS NULL THEN
        INSERT INTO chaos_run_log (job_id, scheduled_for, outcome, attempts, token, node_id, error,
                                   at, run_id)
        VALUES (OLD.id, OLD.scheduled_for, 'ended', OLD.attempt, OLD.fencing_token,
                OLD.locked_by, NEW.last_error, clock_timestamp(), OLD.run_id);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER chaos_log_claim AFTER UPDATE ON pgpulse_jobs
FOR EACH ROW EXECUTE FUNCTION chaos_log_claim();

-- name: start_execution
-- A handler starts: register its token with the resource (a fencing-aware resource remembers
-- the largest token it has seen, so a zombie's later write is refused once the new owner has
-- shown up) and record the start. Returns whether the token's lease was current.
WITH fence AS (
    INSERT INTO chaos_fence AS f (job_id, max_token) VALUES (%(fence)s, %(token)s)
    ON CONFLICT (job_id) DO UPDATE SET max_token = greatest(f.max_token, excluded.max_token)
    RETURNING f.max_token
)
INSERT INTO chaos_history (uid, job_id, scheduled_for, attempt, token, run_id, node_id, kind,
                           started_at, planned, occurrence, lease_ok_at_start)
SELECT %(uid)s, %(job_id)s, %(scheduled_for)s, %(attempt)s, %(token)s, %(run_id)s, %(node)s,
       %(kind)s, clock_timestamp(), %(planned)s, %(occurrence)s,
       CASE WHEN %(fence)s > 0
            THEN EXISTS (SELECT 1 FROM pgpulse_jobs j
                         WHERE j.id = %(job_id)s AND j.fencing_token = %(token)s
                           AND j.status = 'running' AND j.lease_expires_at > clock_timestamp())
            ELSE EXISTS (SELECT 1 FROM pgpulse_occurrences o
                         WHERE o.id = %(run_id)s AND o.fencing_token = %(token)s
                           AND o.lease_expires_at > clock_timestamp())
       END
FROM fence
RETURNING lease_ok_at_start;

-- name: apply_effect
-- A handler's side effect, guarded by its fencing token as README tells users to: accepted only
-- if no larger token has been seen for the job. With %(lease_guard)s the guard also requires the
-- token's lease to be current (possible only because this "resource" shares Pulse's database).
-- The effect (keyed by occurrence) and the end of the history row commit together, so the
-- history never disagrees with the effects. The verdict comes back even when the history row is
-- gone (a failover lost its start): the node's journal records it either way. The row is found
-- by its uid, not its id: after such a failover the identity hands its id out again.
-- committed_at: the database's clock_timestamp() of the verdict, the end instant the history row
-- gets; the node journals it, so the checker has the effect's instant on the database's clock
-- even when a failover lost the row (it precedes the commit by the rest of this statement).
WITH fence AS (
    SELECT f.max_token FROM chaos_fence f WHERE f.job_id = %(fence)s FOR UPDATE
), lease AS (
    SELECT CASE WHEN %(fence)s > 0
                THEN EXISTS (SELECT 1 FROM pgpulse_jobs j
                             WHERE j.id = %(job_id)s AND j.fencing_token = %(token)s
                               AND j.status = 'running'
                               AND j.lease_expires_at > clock_timestamp())
                ELSE EXISTS (SELECT 1 FROM pgpulse_occurrences o
                             WHERE o.id = %(run_id)s AND o.fencing_token = %(token)s
                               AND o.lease_expires_at > clock_timestamp())
           END AS ok
), verdict AS (
    SELECT coalesce((SELECT max_token FROM fence), 0) <= %(token)s
               AND (NOT %(lease_guard)s OR lease.ok) AS accepted,
           lease.ok AS lease_ok, clock_timestamp() AS at
    FROM lease
), effect AS (
    INSERT INTO chaos_effects AS e (job_id, scheduled_for, extra, token, node_id, applied,
                                    first_at, last_at)
    SELECT %(job_id)s, %(scheduled_for)s, %(extra)s, %(token)s, %(node)s, 1, v.at, v.at
    FROM verdict v WHERE v.accepted
    ON CONFLICT (job_id, scheduled_for, extra) DO UPDATE
    SET token = excluded.token, node_id = excluded.node_id, applied = e.applied + 1,
        last_at = excluded.last_at
    RETURNING 1
), history AS (
    UPDATE chaos_history h
    SET ended_at = v.at, result = CASE WHEN v.accepted THEN 'applied' ELSE 'fenced' END,
        lease_ok_at_end = v.lease_ok
    FROM verdict v
    WHERE h.uid = %(uid)s
    RETURNING 1
)
SELECT CASE WHEN v.accepted THEN 'applied' ELSE 'fenced' END AS result,
       v.lease_ok AS lease_ok_at_end, v.at AS committed_at,
       (SELECT count(*) FROM effect) AS effects, (SELECT count(*) FROM history) AS recorded
FROM verdict v;

-- name: fail_execution
-- A handler fails on purpose (before any effect): close its history row (found by uid, as in
-- apply_effect); whether its lease was current and its end instant (committed_at, as in
-- apply_effect) come back even if the row is gone.
WITH lease AS (
    SELECT CASE WHEN %(fence)s > 0
                THEN EXISTS (SELECT 1 FROM pgpulse_jobs j
                             WHERE j.id = %(job_id)s AND j.fencing_token = %(token)s
                               AND j.status = 'running'
                               AND j.lease_expires_at > clock_timestamp())
                ELSE EXISTS (SELECT 1 FROM pgpulse_occurrences o
                             WHERE o.id = %(run_id)s AND o.fencing_token = %(token)s
                               AND o.lease_expires_at > clock_timestamp())
           END AS ok,
           clock_timestamp() AS at
), history AS (
    UPDATE chaos_history h
    SET ended_at = lease.at, result = 'failed', lease_ok_at_end = lease.ok
    FROM lease
    WHERE h.uid = %(uid)s
    RETURNING 1
)
SELECT lease.ok AS lease_ok_at_end, lease.at AS committed_at,
       (SELECT count(*) FROM history) AS recorded
FROM lease;

-- name: clock
-- The database's clock, read once (the harness measures its offset from this process's).
SELECT clock_timestamp() AS at;

-- name: live_nodes
SELECT count(*) AS n FROM pgpulse_nodes
WHERE state = 'alive' AND last_heartbeat > now() - make_interval(secs => %(ttl)s);

-- name: leader
-- The node holding the leader lock now (NULL if none), as pgpulse status shows it.
SELECT regexp_replace(substr(a.application_name, 9), ':beat$', '') AS node_id
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.classid::bigint = 0 AND l.objid::bigint = %(key)s
  AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
LIMIT 1;

-- name: in_flight
-- A sync (uncancellable) handler execution on %(node)s with at least %(margin)s seconds of work
-- left before its effect (one that fails on purpose has none: planned is NULL): a pause now
-- freezes it before the effect (faults.py).
SELECT job_id FROM chaos_history
WHERE node_id = %(node)s AND kind = 'blocking' AND ended_at IS NULL
  AND started_at + make_interval(secs => planned)
      > clock_timestamp() + make_interval(secs => %(margin)s)
LIMIT 1;

-- name: progress
SELECT count(*) AS executions, count(*) FILTER (WHERE result = 'applied') AS applied,
       count(*) FILTER (WHERE result = 'fenced') AS fenced
FROM chaos_history;

-- name: read_history
-- committed_at: a row's end is the database's instant of the statement that ended it.
SELECT id, job_id, scheduled_for, attempt, token, node_id, kind, started_at, ended_at, result,
       lease_ok_at_start, lease_ok_at_end, uid, run_id, ended_at AS committed_at, occurrence
FROM chaos_history ORDER BY id;

-- name: read_run_log
SELECT id, job_id, scheduled_for, outcome, attempts, token, node_id, error, at, run_id, kind
FROM chaos_run_log ORDER BY at, id;

-- name: read_runs
-- The run rows, and the extra occurrences still to run (overlap allow/replace forks: pending or
-- running in pgpulse_occurrences, with or without a run row of an earlier attempt) as 'queued':
-- a backlog the job row has passed but its occurrences have not drained yet. Triggers and
-- backfills likewise, each with its run id, kind and batch.
SELECT r.job_id, r.scheduled_for,
       CASE WHEN EXISTS (SELECT 1 FROM pgpulse_occurrences o WHERE o.id = r.id)
            THEN 'queued' ELSE r.outcome END AS outcome,
       r.attempts, r.fencing_token AS token, r.last_scheduled_for, r.id, r.kind, r.batch_id,
       r.error
FROM pgpulse_runs r
UNION ALL
SELECT o.job_id, o.scheduled_for, 'queued', o.attempt, o.fencing_token, NULL::timestamptz, o.id,
       o.kind, o.batch_id, NULL::text
FROM pgpulse_occurrences o
WHERE NOT EXISTS (SELECT 1 FROM pgpulse_runs r WHERE r.id = o.id)
ORDER BY 1, 2;

-- name: read_jobs
-- Every job with its state at the check, and the database's instant of the check.
SELECT j.id, j.name, j.schedule, j.timezone, j.handler, j.catch_up, j.anchor_at, j.status,
       j.scheduled_for, j.lease_expires_at, j.locked_by, j.last_error, j.overlap, j.max_concurrency,
       clock_timestamp() AS checked_at
FROM pgpulse_jobs j ORDER BY j.id;

-- name: backlog
-- Jobs of any policy whose current occurrence is not yet past %(at)s, and extra occurrences
-- (forks under overlap allow/replace) of %(at)s or before still to run: their backlog is still
-- running, and the checker cannot check an occurrence its job has not reached.
SELECT (SELECT count(*) FROM pgpulse_jobs
        WHERE status IN ('idle', 'running') AND scheduled_for <= %(at)s)
       + (SELECT count(*) FROM pgpulse_occurrences WHERE scheduled_for <= %(at)s) AS n;
