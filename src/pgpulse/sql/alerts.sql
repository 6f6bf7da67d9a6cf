-- Alerts' statements (pgpulse.alerts; docs/alerts.md): evaluation, delivery claims and their
-- fenced outcomes, and the reads and writes of notifiers, rules, events and silences.
--
-- An evaluation (AlertStore.evaluate) is one transaction: each rule kind's statements, in the
-- order of pgpulse.alerts.store.JOB_RULE_STATEMENTS and LEADER_RULE_STATEMENTS (alert_recovered
-- first; the cluster rules on the leader only; alert_no_live_node last), and alert_next_due; then alert_queue_deliveries for the events they inserted.
-- Any node may evaluate at any time. A rule kind's statement inserts its new events in key
-- order, after a look-up that skips the keys already fired, with the unique dedupe_key as the
-- arbiter: evaluations racing on a key produce one event, and as every evaluation inserts in
-- the same order (kind, then key), racing ones wait for each other rather than deadlock. Those
-- keys are held until the commit; what else a statement locks, its header says. A job's own
-- rule of a kind replaces the cluster-wide default (job_id NULL). Each returns one row: fired,
-- the ids of its new events, and closed, how many open events it resolved.

-- name: alert_recovered
-- recovered: the open events of a job whose last run succeeded after they fired close; a job
-- with a recovered rule gets one event, closed as it fires, naming them (details.resolves).
-- Sent first in an evaluation, so it closes only events fired before it. Locks: the events it
-- closes. Key: job/<job>/recovered/<the success's finished_at>.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), healed AS (
    SELECT e.id, e.job_id, j.last_finished_at
    FROM pgpulse_alert_events e
    JOIN pgpulse_jobs j ON j.id = e.job_id
    WHERE e.resolved_at IS NULL
      AND e.job_id IS NOT NULL
      AND j.last_outcome = 'succeeded'
      AND j.last_finished_at > e.fired_at
), candidates AS (
    SELECT h.job_id, max(h.last_finished_at) AS scheduled_for,
           jsonb_build_object('resolves', array_agg(h.id ORDER BY h.id)) AS details,
           eff.notifiers,
           'job/' || h.job_id || '/recovered/'
           || extract(epoch FROM max(h.last_finished_at))::text AS key
    FROM healed h
    CROSS JOIN LATERAL (
        SELECT r.notifiers
        FROM pgpulse_alert_rules r
        WHERE r.rule = 'recovered'
          AND (r.job_id = h.job_id OR r.job_id IS NULL)
        ORDER BY r.job_id NULLS LAST
        LIMIT 1
    ) eff
    GROUP BY h.job_id, eff.notifiers
), fresh AS (
    INSERT INTO pgpulse_alert_events AS e (dedupe_key, job_id, rule, scheduled_for, fired_at,
                                           details, notifiers, resolved_at)
    SELECT c.key, c.job_id, 'recovered', c.scheduled_for, clock.now, c.details, c.notifiers,
           clock.now  -- the one event over when it fires
    FROM candidates c, clock
    WHERE NOT EXISTS (SELECT 1 FROM pgpulse_alert_events o WHERE o.dedupe_key = c.key)
    ORDER BY c.key
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING e.id
), closed AS (
    UPDATE pgpulse_alert_events e
    SET resolved_at = clock.now
    FROM clock
    WHERE e.id IN (SELECT h.id FROM healed h)
      AND e.resolved_at IS NULL
    RETURNING e.id
)
SELECT ARRAY(SELECT f.id FROM fresh f) AS fired, (SELECT count(*) FROM closed)::int AS closed;

-- name: alert_failures
-- failures: a run that ended failed within %(lookback)s seconds, after its rule was set, and
-- made its job's streak of failed runs exactly N long (the threshold; retries that later
-- succeed are not failed runs). The streak is the runs in the order they were recorded (the
-- (job_id, id DESC) index), not by occurrence: a failing backfill of older occurrences
-- continues it. Locks nothing else. Key: job/<job>/failures/<that run's scheduled_for>: one
-- event per streak. It closes when the job succeeds again (alert_recovered).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), candidates AS (
    SELECT rc.job_id, rc.scheduled_for, rc.id AS run_id, rc.error,
           jsonb_build_object('consecutive_failures', eff.threshold::int) AS details,
           eff.notifiers,
           'job/' || rc.job_id || '/failures/' || extract(epoch FROM rc.scheduled_for)::text AS key
    FROM pgpulse_runs rc
    CROSS JOIN clock
    CROSS JOIN LATERAL (
        SELECT r.threshold, r.notifiers, r.created_at
        FROM pgpulse_alert_rules r
        WHERE r.rule = 'failures'
          AND (r.job_id = rc.job_id OR r.job_id IS NULL)
        ORDER BY r.job_id NULLS LAST
        LIMIT 1
    ) eff
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE s.k <= eff.threshold AND s.outcome = 'failed') AS failed,
               count(*) FILTER (WHERE s.k > eff.threshold AND s.outcome = 'failed') AS before
        FROM (
            SELECT p.outcome, row_number() OVER (ORDER BY p.id DESC) AS k
            FROM (
                SELECT p.outcome, p.id
                FROM pgpulse_runs p
                WHERE p.job_id = rc.job_id
                  AND p.id <= rc.id
                  AND p.outcome IN ('succeeded', 'failed')
                ORDER BY p.id DESC
                LIMIT coalesce(eff.threshold, 1)::int + 1
            ) p
        ) s
    ) streak
    WHERE rc.finished_at > clock.now - make_interval(secs => %(lookback)s)
      AND rc.outcome = 'failed'
      AND rc.finished_at >= eff.created_at  -- a new rule does not fire on older failures
      AND streak.failed = coalesce(eff.threshold, 1)
      AND streak.before = 0
), fresh AS (
    INSERT INTO pgpulse_alert_events AS e (dedupe_key, job_id, rule, scheduled_for, run_id,
                                           fired_at, error, details, notifiers)
    SELECT c.key, c.job_id, 'failures', c.scheduled_for, c.run_id, clock.now, c.error,
           c.details, c.notifiers
    FROM candidates c, clock
    WHERE NOT EXISTS (SELECT 1 FROM pgpulse_alert_events o WHERE o.dedupe_key = c.key)
    ORDER BY c.key
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING e.id
)
SELECT ARRAY(SELECT f.id FROM fresh f) AS fired, 0 AS closed;

-- name: alert_skipped
-- skipped: a run row of skipped occurrences (one row for the occurrences an outcome skipped)
-- that ended within %(lookback)s seconds. Locks nothing else. Key: job/<job>/skipped/<the
-- first skipped occurrence>. It closes when the job succeeds again (alert_recovered).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), candidates AS (
    SELECT rc.job_id, rc.scheduled_for, rc.id AS run_id, rc.error,
           jsonb_build_object('occurrences', rc.occurrences,
                              'last_scheduled_for', rc.last_scheduled_for) AS details,
           eff.notifiers,
           'job/' || rc.job_id || '/skipped/' || extract(epoch FROM rc.scheduled_for)::text AS key
    FROM pgpulse_runs rc
    CROSS JOIN clock
    CROSS JOIN LATERAL (
        SELECT r.notifiers
        FROM pgpulse_alert_rules r
        WHERE r.rule = 'skipped'
          AND (r.job_id = rc.job_id OR r.job_id IS NULL)
        ORDER BY r.job_id NULLS LAST
        LIMIT 1
    ) eff
    WHERE rc.finished_at > clock.now - make_interval(secs => %(lookback)s)
      AND rc.outcome = 'skipped'
), fresh AS (
    INSERT INTO pgpulse_alert_events AS e (dedupe_key, job_id, rule, scheduled_for, run_id,
                                           fired_at, error, details, notifiers)
    SELECT c.key, c.job_id, 'skipped', c.scheduled_for, c.run_id, clock.now, c.error,
           c.details, c.notifiers
    FROM candidates c, clock
    WHERE NOT EXISTS (SELECT 1 FROM pgpulse_alert_events o WHERE o.dedupe_key = c.key)
    ORDER BY c.key
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING e.id
)
SELECT ARRAY(SELECT f.id FROM fresh f) AS fired, 0 AS closed;

-- name: alert_late
-- late: an idle job whose current occurrence was not started S seconds after it was due, among
-- the %(limit)s idle jobs due longest ago past the smallest late or missed threshold (the jobs
-- alert_missed reads). Locks nothing else. Key: job/<job>/late/<the occurrence>. It closes
-- when the job succeeds again (alert_recovered).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), overdue AS (
    SELECT j.id, j.scheduled_for, j.run_id
    FROM pgpulse_jobs j, clock
    WHERE j.status = 'idle'
      AND j.next_run_at <= clock.now - make_interval(secs => (
              SELECT min(r.threshold) FROM pgpulse_alert_rules r
              WHERE r.rule IN ('late', 'missed')))
      AND j.attempt = 0
    ORDER BY j.next_run_at
    LIMIT %(limit)s
), candidates AS (
    SELECT o.id AS job_id, o.scheduled_for, o.run_id,
           jsonb_build_object('threshold_seconds', eff.threshold,
                              'late_by_seconds',
                              extract(epoch FROM clock.now - o.scheduled_for)::float8) AS details,
           eff.notifiers,
           'job/' || o.id || '/late/' || extract(epoch FROM o.scheduled_for)::text AS key
    FROM overdue o
    CROSS JOIN clock
    CROSS JOIN LATERAL (
        SELECT r.threshold, r.notifiers
        FROM pgpulse_alert_rules r
        WHERE r.rule = 'late'
          AND (r.job_id = o.id OR r.job_id IS NULL)
        ORDER BY r.job_id NULLS LAST
        LIMIT 1
    ) eff
    WHERE o.scheduled_for <= clock.now - make_interval(secs => eff.threshold)
), fresh AS (
    INSERT INTO pgpulse_alert_events AS e (dedupe_key, job_id, rule, scheduled_for, run_id,
                                           fired_at, details, notifiers)
    SELECT c.key, c.job_id, 'late', c.scheduled_for, c.run_id, clock.now, c.details,
           c.notifiers
    FROM candidates c, clock
    WHERE NOT EXISTS (SELECT 1 FROM pgpulse_alert_events o WHERE o.dedupe_key = c.key)
    ORDER BY c.key
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING e.id
)
SELECT ARRAY(SELECT f.id FROM fresh f) AS fired, 0 AS closed;

-- name: alert_missed
-- missed: alert_late's test for a backfill job (catch_up backfill: an occurrence it owes still
-- not run S seconds after it was due), among the same jobs. Locks nothing else. Key:
-- job/<job>/missed/<the occurrence>. It closes when the job succeeds again (alert_recovered).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), overdue AS (
    SELECT j.id, j.scheduled_for, j.run_id, j.catch_up
    FROM pgpulse_jobs j, clock
    WHERE j.status = 'idle'
      AND j.next_run_at <= clock.now - make_interval(secs => (
              SELECT min(r.threshold) FROM pgpulse_alert_rules r
              WHERE r.rule IN ('late', 'missed')))
      AND j.attempt = 0
    ORDER BY j.next_run_at
    LIMIT %(limit)s
), candidates AS (
    SELECT o.id AS job_id, o.scheduled_for, o.run_id,
           jsonb_build_object('threshold_seconds', eff.threshold,
                              'late_by_seconds',
                              extract(epoch FROM clock.now - o.scheduled_for)::float8) AS details,
           eff.notifiers,
           'job/' || o.id || '/missed/' || extract(epoch FROM o.scheduled_for)::text AS key
    FROM overdue o
    CROSS JOIN clock
    CROSS JOIN LATERAL (
        SELECT r.threshold, r.notifiers
        FROM pgpulse_alert_rules r
        WHERE r.rule = 'missed'
          AND (r.job_id = o.id OR r.job_id IS NULL)
        ORDER BY r.job_id NULLS LAST
        LIMIT 1
    ) eff
    WHERE o.catch_up = 'backfill'
      AND o.scheduled_for <= clock.now - make_interval(secs => eff.threshold)
), fresh AS (
    INSERT INTO pgpulse_alert_events AS e (dedupe_key, job_id, rule, scheduled_for, run_id,
                                           fired_at, details, notifiers)
    SELECT c.key, c.job_id, 'missed', c.scheduled_for, c.run_id, clock.now, c.details,
           c.notifiers
    FROM candidates c, clock
    WHERE NOT EXISTS (SELECT 1 FROM pgpulse_alert_events o WHERE o.dedupe_key = c.key)
    ORDER BY c.key
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING e.id
)
SELECT ARRAY(SELECT f.id FROM fresh f) AS fired, 0 AS closed;

-- name: alert_silence
-- silence (the dead man's switch): a job with no successful run within W seconds, since its
-- last success, else since it was created, whatever the reason. Locks nothing else. Key:
-- job/<job>/silence/<that instant>: one event per silent stretch. It closes when the job
-- succeeds again (alert_recovered).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), watched AS (
    SELECT r.job_id, r.threshold, r.notifiers
    FROM pgpulse_alert_rules r
    WHERE r.rule = 'silence'
      AND r.job_id IS NOT NULL
    UNION ALL
    SELECT j.id, d.threshold, d.notifiers
    FROM pgpulse_alert_rules d
    JOIN pgpulse_jobs j ON true
    WHERE d.rule = 'silence'
      AND d.job_id IS NULL
      AND NOT EXISTS (SELECT 1 FROM pgpulse_alert_rules o
                      WHERE o.rule = 'silence' AND o.job_id = j.id)
), candidates AS (
    SELECT j.id AS job_id, since.at AS scheduled_for, j.last_error AS error,
           jsonb_build_object('window_seconds', w.threshold, 'since', since.at,
                              'status', j.status) AS details,
           w.notifiers,
           'job/' || j.id || '/silence/' || extract(epoch FROM since.at)::text AS key
    FROM watched w
    JOIN pgpulse_jobs j ON j.id = w.job_id
    CROSS JOIN LATERAL (
        SELECT coalesce(
                   CASE WHEN j.last_outcome = 'succeeded' THEN j.last_finished_at END,
                   (SELECT max(p.finished_at) FROM pgpulse_runs p
                    WHERE p.job_id = j.id AND p.outcome = 'succeeded'),
                   j.created_at) AS at
    ) since
    CROSS JOIN clock
    WHERE since.at <= clock.now - make_interval(secs => w.threshold)
), fresh AS (
    INSERT INTO pgpulse_alert_events AS e (dedupe_key, job_id, rule, scheduled_for, fired_at,
                                           error, details, notifiers)
    SELECT c.key, c.job_id, 'silence', c.scheduled_for, clock.now, c.error, c.details,
           c.notifiers
    FROM candidates c, clock
    WHERE NOT EXISTS (SELECT 1 FROM pgpulse_alert_events o WHERE o.dedupe_key = c.key)
    ORDER BY c.key
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING e.id
)
SELECT ARRAY(SELECT f.id FROM fresh f) AS fired, 0 AS closed;

-- name: alert_deadline
-- deadline, sent by the leader only: an occurrence of a job with a deadline D (pgpulse_jobs.
-- deadline) not succeeded D after its scheduled_for (a backfilled one: after it was queued),
-- whatever holds it: running, retrying, waiting for its turn or not started; the run goes on.
-- The job's own occurrence is read through pgpulse_jobs_deadline (jobs with a deadline whose
-- occurrence is due or running), its extra occurrences (triggers, backfills, forks) from
-- pgpulse_occurrences (pending work only); none of history. The %(limit)s past their deadline
-- longest ago that have not fired. Locks nothing else. Key: job/<job>/deadline/<scheduled_for>
-- for a scheduled occurrence (the job row's, or its fork), job/<job>/deadline/run/<run id> for
-- a triggered or backfilled one: once per occurrence. Closes when the job succeeds
-- (alert_recovered).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), held AS (
    SELECT j.id AS job_id, 'scheduled' AS kind, j.scheduled_for, j.run_id, j.deadline,
           j.scheduled_for AS since,
           CASE WHEN j.status = 'running' THEN 'running'
                WHEN j.attempt > 0 THEN 'retrying' ELSE 'not_started' END AS state
    FROM pgpulse_jobs j, clock
    WHERE j.deadline IS NOT NULL
      AND j.scheduled_for <= clock.now - interval '1 second'
      AND j.status IN ('idle', 'running')
    UNION ALL
    SELECT o.job_id, o.kind, o.scheduled_for, o.id, j.deadline,
           CASE WHEN o.kind = 'backfill' THEN greatest(o.scheduled_for, o.created_at)
                ELSE o.scheduled_for END,
           CASE WHEN o.lease_expires_at IS NOT NULL THEN 'running'
                WHEN o.attempt > 0 THEN 'retrying' ELSE 'waiting' END
    FROM pgpulse_occurrences o
    CROSS JOIN LATERAL (  -- LIMIT: each occurrence's job by its key, never a scan of jobs
        SELECT j.deadline FROM pgpulse_jobs j
        WHERE j.id = o.job_id AND j.deadline IS NOT NULL
        LIMIT 1
    ) j
), passed AS (
    SELECT h.*, h.since + h.deadline AS due_by,
           'job/' || h.job_id || '/deadline/'
           || CASE WHEN h.kind = 'scheduled' THEN extract(epoch FROM h.scheduled_for)::text
                   ELSE 'run/' || h.run_id END AS key
    FROM held h, clock
    WHERE EXISTS (SELECT 1 FROM pgpulse_alert_rules r WHERE r.rule = 'deadline')
      AND h.since + h.deadline <= clock.now
), candidates AS (
    SELECT p.job_id, p.scheduled_for, p.run_id, p.key, eff.notifiers,
           jsonb_build_object('deadline_seconds', extract(epoch FROM p.deadline)::float8,
                              'state', p.state, 'kind', p.kind,
                              'over_by_seconds',
                              extract(epoch FROM clock.now - p.due_by)::float8) AS details
    FROM passed p
    CROSS JOIN clock
    CROSS JOIN LATERAL (
        SELECT r.notifiers
        FROM pgpulse_alert_rules r
        WHERE r.rule = 'deadline'
          AND (r.job_id = p.job_id OR r.job_id IS NULL)
        ORDER BY r.job_id NULLS LAST
        LIMIT 1
    ) eff
    -- a look-up by the unique key per candidate (LIMIT: never a join over every event)
    WHERE (SELECT o.id FROM pgpulse_alert_events o WHERE o.dedupe_key = p.key LIMIT 1) IS NULL
    ORDER BY p.due_by
    LIMIT %(limit)s
), fresh AS (
    INSERT INTO pgpulse_alert_events AS e (dedupe_key, job_id, rule, scheduled_for, run_id,
                                           fired_at, details, notifiers)
    SELECT c.key, c.job_id, 'deadline', c.scheduled_for, c.run_id, clock.now, c.details,
           c.notifiers
    FROM candidates c, clock
    ORDER BY c.key
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING e.id
)
SELECT ARRAY(SELECT f.id FROM fresh f) AS fired, 0 AS closed;

-- name: alert_deadline_ended
-- deadline, sent by the leader only after alert_deadline: a scheduled or triggered run of a job
-- with a deadline that ended (whatever its outcome but skipped) within the last %(recent)s
-- seconds, after its deadline: it was held past it, and ended before an evaluation saw it
-- pending. Runs read through pgpulse_runs_finished (BRIN on finished_at): only those that ended
-- in the window. A backfilled run is left out: when it was queued went with its occurrence row.
-- Locks nothing else. Key: alert_deadline's, so an occurrence fires once, seen pending or ended.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), passed AS (
    SELECT r.job_id, r.kind, r.scheduled_for, r.id AS run_id, j.deadline, r.outcome,
           r.finished_at,
           'job/' || r.job_id || '/deadline/'
           || CASE WHEN r.kind = 'scheduled' THEN extract(epoch FROM r.scheduled_for)::text
                   ELSE 'run/' || r.id END AS key
    FROM pgpulse_runs r
    JOIN pgpulse_jobs j ON j.id = r.job_id
    CROSS JOIN clock
    WHERE EXISTS (SELECT 1 FROM pgpulse_alert_rules a WHERE a.rule = 'deadline')
      AND r.finished_at >= clock.now - make_interval(secs => %(recent)s)
      AND r.kind IN ('scheduled', 'trigger')
      AND r.outcome <> 'skipped'
      AND j.deadline IS NOT NULL
      AND r.finished_at > r.scheduled_for + j.deadline
), candidates AS (
    SELECT p.job_id, p.scheduled_for, p.run_id, p.key, eff.notifiers,
           jsonb_build_object('deadline_seconds', extract(epoch FROM p.deadline)::float8,
                              'state', 'ended_' || p.outcome, 'kind', p.kind,
                              'over_by_seconds',
                              extract(epoch FROM p.finished_at - p.scheduled_for
                                                 - p.deadline)::float8) AS details
    FROM passed p
    CROSS JOIN LATERAL (
        SELECT r.notifiers
        FROM pgpulse_alert_rules r
        WHERE r.rule = 'deadline'
          AND (r.job_id = p.job_id OR r.job_id IS NULL)
        ORDER BY r.job_id NULLS LAST
        LIMIT 1
    ) eff
    WHERE (SELECT o.id FROM pgpulse_alert_events o WHERE o.dedupe_key = p.key LIMIT 1) IS NULL
), fresh AS (
    INSERT INTO pgpulse_alert_events AS e (dedupe_key, job_id, rule, scheduled_for, run_id,
                                           fired_at, details, notifiers)
    SELECT c.key, c.job_id, 'deadline', c.scheduled_for, c.run_id, clock.now, c.details,
           c.notifiers
    FROM candidates c, clock
    ORDER BY c.key
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING e.id
)
SELECT ARRAY(SELECT f.id FROM fresh f) AS fired, 0 AS closed;

-- name: alert_node_died
-- node_died, sent by the leader only: a node alive by its row, silent past its ttl, that last
-- said it ran attempts. Its open events close when the node is back (a fresh heartbeat under
-- the same id), stopped, or gone from pgpulse_nodes. Locks: the events it closes. Key:
-- node/<node>/<its start>: one event per life of a node.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), candidates AS (
    SELECT n.last_heartbeat AS scheduled_for,
           jsonb_build_object('node', n.node_id, 'running', n.running,
                              'last_heartbeat', n.last_heartbeat) AS details,
           r.notifiers, 'node/' || n.node_id || '/' || extract(epoch FROM n.started_at)::text AS key
    FROM pgpulse_alert_rules r
    JOIN pgpulse_nodes n ON n.state = 'alive' AND n.running > 0
    CROSS JOIN clock
    WHERE r.rule = 'node_died'
      AND r.job_id IS NULL
      AND n.last_heartbeat < clock.now - make_interval(secs => coalesce(n.ttl, 10))
), fresh AS (
    INSERT INTO pgpulse_alert_events AS e (dedupe_key, rule, scheduled_for, fired_at, details,
                                           notifiers)
    SELECT c.key, 'node_died', c.scheduled_for, clock.now, c.details, c.notifiers
    FROM candidates c, clock
    WHERE NOT EXISTS (SELECT 1 FROM pgpulse_alert_events o WHERE o.dedupe_key = c.key)
    ORDER BY c.key
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING e.id
), revived AS (
    SELECT e.id
    FROM pgpulse_alert_events e
    LEFT JOIN pgpulse_nodes n ON n.node_id = e.details ->> 'node'
    CROSS JOIN clock
    WHERE e.rule = 'node_died'
      AND e.job_id IS NULL
      AND e.resolved_at IS NULL
      AND (n.node_id IS NULL
           OR n.state = 'stopped'
           OR n.last_heartbeat >= clock.now - make_interval(secs => coalesce(n.ttl, 10)))
), closed AS (
    UPDATE pgpulse_alert_events e
    SET resolved_at = clock.now
    FROM clock
    WHERE e.id IN (SELECT v.id FROM revived v)
      AND e.resolved_at IS NULL
    RETURNING e.id
)
SELECT ARRAY(SELECT f.id FROM fresh f) AS fired, (SELECT count(*) FROM closed)::int AS closed;

-- name: alert_leader_changed
-- leader_changed, sent by the leader only (%(node)s): the leader recorded in pgpulse_alert_state
-- is another node. Every leader records itself, rule or not (a rule set just before a failover
-- knows the leader it had), and the first one recorded is no change. A notice: open until it
-- is acknowledged. Locks: that state row, when it changes. Key: leader/<the previous leader's
-- record>/<node>.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), last_leader AS (
    SELECT s.value AS leader, s.updated_at
    FROM pgpulse_alert_state s
    WHERE s.rule = 'leader_changed'
), seen AS (
    -- written only when this leader is not the one recorded
    INSERT INTO pgpulse_alert_state AS s (rule, value, updated_at)
    SELECT 'leader_changed', %(node)s::text, clock.now
    FROM clock
    WHERE (SELECT l.leader FROM last_leader l) IS DISTINCT FROM %(node)s::text
    ON CONFLICT (rule) DO UPDATE
    SET value = excluded.value, updated_at = excluded.updated_at
    RETURNING s.rule
), candidates AS (
    SELECT jsonb_build_object('leader', %(node)s::text, 'previous', l.leader) AS details,
           r.notifiers,
           'leader/' || extract(epoch FROM l.updated_at)::text || '/' || %(node)s::text AS key
    FROM pgpulse_alert_rules r
    JOIN last_leader l ON l.leader IS DISTINCT FROM %(node)s::text
    WHERE r.rule = 'leader_changed'
      AND r.job_id IS NULL
), fresh AS (
    INSERT INTO pgpulse_alert_events AS e (dedupe_key, rule, fired_at, details, notifiers)
    SELECT c.key, 'leader_changed', clock.now, c.details, c.notifiers
    FROM candidates c, clock
    WHERE NOT EXISTS (SELECT 1 FROM pgpulse_alert_events o WHERE o.dedupe_key = c.key)
    ORDER BY c.key
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING e.id
)
SELECT ARRAY(SELECT f.id FROM fresh f) AS fired, 0 AS closed;

-- name: alert_lag
-- lag, sent by the leader only: an idle job due more than S seconds ago (lag_seconds: the most
-- overdue one's wait). Its open event closes when no job is. Locks: the event it closes. Key:
-- cluster/lag/<now>: at most one open event, as a new one fires only when none is open.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), worst AS (
    SELECT r.threshold, r.notifiers,
           (SELECT extract(epoch FROM clock.now - min(j.next_run_at))::float8
            FROM pgpulse_jobs j
            WHERE j.status = 'idle'
              AND j.next_run_at <= clock.now - make_interval(secs => r.threshold)) AS lag,
           (SELECT e.id FROM pgpulse_alert_events e
            WHERE e.rule = 'lag' AND e.job_id IS NULL AND e.resolved_at IS NULL
            LIMIT 1) AS open_id
    FROM pgpulse_alert_rules r, clock
    WHERE r.rule = 'lag'
      AND r.job_id IS NULL
), candidates AS (
    SELECT jsonb_build_object('lag_seconds', w.lag, 'threshold_seconds', w.threshold) AS details,
           w.notifiers, 'cluster/lag/' || extract(epoch FROM clock.now)::text AS key
    FROM worst w, clock
    WHERE w.lag IS NOT NULL
      AND w.open_id IS NULL
), fresh AS (
    INSERT INTO pgpulse_alert_events AS e (dedupe_key, rule, fired_at, details, notifiers)
    SELECT c.key, 'lag', clock.now, c.details, c.notifiers
    FROM candidates c, clock
    WHERE NOT EXISTS (SELECT 1 FROM pgpulse_alert_events o WHERE o.dedupe_key = c.key)
    ORDER BY c.key
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING e.id
), closed AS (
    UPDATE pgpulse_alert_events e
    SET resolved_at = clock.now
    FROM clock
    WHERE e.id IN (SELECT w.open_id FROM worst w WHERE w.lag IS NULL)
      AND e.resolved_at IS NULL
    RETURNING e.id
)
SELECT ARRAY(SELECT f.id FROM fresh f) AS fired, (SELECT count(*) FROM closed)::int AS closed;

-- name: alert_no_live_node
-- no_live_node, sent by a node that found no live node as it started (AlertStore.cluster_outage
-- gives %(outage_since)s, the last heartbeat any node sent, and %(outage_until)s, its start):
-- the gap was longer than S seconds. A notice: open until it is acknowledged. Locks nothing
-- else. Key: cluster/no_live_node/<since>: one event per gap, however many nodes start in it.
WITH candidates AS (
    SELECT jsonb_build_object('since', %(outage_since)s::timestamptz,
                              'until', %(outage_until)s::timestamptz,
                              'gap_seconds', extract(epoch FROM %(outage_until)s::timestamptz
                                                     - %(outage_since)s::timestamptz)::float8,
                              'threshold_seconds', r.threshold,
                              'node', %(node)s::text) AS details,
           r.notifiers,
           'cluster/no_live_node/' || extract(epoch FROM %(outage_since)s::timestamptz)::text
               AS key
    FROM pgpulse_alert_rules r
    WHERE r.rule = 'no_live_node'
      AND r.job_id IS NULL
      AND %(outage_since)s::timestamptz
          < %(outage_until)s::timestamptz - make_interval(secs => r.threshold)
), fresh AS (
    INSERT INTO pgpulse_alert_events AS e (dedupe_key, rule, fired_at, details, notifiers)
    SELECT c.key, 'no_live_node', coalesce(%(now)s::timestamptz, now()), c.details, c.notifiers
    FROM candidates c
    WHERE NOT EXISTS (SELECT 1 FROM pgpulse_alert_events o WHERE o.dedupe_key = c.key)
    ORDER BY c.key
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING e.id
)
SELECT ARRAY(SELECT f.id FROM fresh f) AS fired, 0 AS closed;

-- name: alert_next_due
-- The first instant a pending delivery is due (NULL: none), but one waiting behind an earlier
-- event's pending delivery to the same notifier (its turn comes when that one ends); and the
-- database's clock. An evaluation sends it before alert_queue_deliveries: it sees only the
-- deliveries queued before. Locks nothing.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
SELECT (SELECT min(d.next_attempt_at)
        FROM pgpulse_alert_deliveries d
        JOIN pgpulse_alert_events e ON e.id = d.event_id
        WHERE d.status = 'pending'
          AND NOT EXISTS (SELECT 1
                          FROM pgpulse_alert_deliveries b
                          JOIN pgpulse_alert_events be ON be.id = b.event_id
                          WHERE b.status = 'pending'
                            AND b.notifier_id = d.notifier_id
                            AND b.event_id < d.event_id
                            AND be.job_id IS NOT DISTINCT FROM e.job_id)) AS next_due,
       clock.now AS db_now
FROM clock;

-- name: alert_queue_deliveries
-- The events %(events)s this transaction just inserted (an evaluation's, alert_raise's): one
-- inside a silence (of its job, or of everything) is marked silenced and gets no delivery;
-- every other gets one pending delivery, due now, per notifier of its rule but a checkin
-- notifier (attempts ping it; alerts do not go to it). Locks: those events (new: no other
-- transaction sees them yet). Returns how many deliveries it queued.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), fresh AS (
    SELECT e.id, e.notifiers,
           EXISTS (SELECT 1 FROM pgpulse_alert_silences s
                   WHERE (s.job_id IS NULL OR s.job_id = e.job_id)
                     AND s.starts_at <= clock.now
                     AND s.ends_at > clock.now) AS silenced
    FROM pgpulse_alert_events e, clock
    WHERE e.id = ANY (%(events)s::bigint[])
), muted AS (
    UPDATE pgpulse_alert_events e
    SET silenced = true
    FROM fresh f
    WHERE e.id = f.id
      AND f.silenced
    RETURNING e.id
), queued AS (
    INSERT INTO pgpulse_alert_deliveries (event_id, notifier_id, next_attempt_at, created_at)
    SELECT f.id, n.id, clock.now, clock.now
    FROM fresh f
    CROSS JOIN LATERAL unnest(f.notifiers) AS wanted (id)
    JOIN pgpulse_notifiers n ON n.id = wanted.id AND n.kind <> 'checkin'
    CROSS JOIN clock
    WHERE NOT f.silenced
    ON CONFLICT (event_id, notifier_id) DO NOTHING
    RETURNING id
)
SELECT (SELECT count(*) FROM queued)::int AS queued, (SELECT count(*) FROM muted)::int AS muted;

-- name: alert_raise
-- A cluster event a node observed itself (split_brain, db_clock: nothing in the tables shows
-- them, so no evaluation statement can), fired as an evaluation fires its own: only if cluster
-- rule %(rule)s is set; once per %(key)s, whichever nodes raise it and however often (the
-- unique dedupe_key). Sent with alert_queue_deliveries in one transaction. Returns the new
-- event's id; no row when the rule is not set or the key fired already.
INSERT INTO pgpulse_alert_events AS e (dedupe_key, job_id, rule, fired_at, details, notifiers)
SELECT %(key)s, NULL, r.rule, coalesce(%(now)s::timestamptz, now()), %(details)s::jsonb,
       r.notifiers
FROM pgpulse_alert_rules r
WHERE r.rule = %(rule)s
  AND r.job_id IS NULL
ON CONFLICT (dedupe_key) DO NOTHING
RETURNING e.id;

-- name: alert_resolve
-- The condition of the open cluster events of rule %(rule)s ended (a split brain healed): they
-- close. Returns the ids closed.
UPDATE pgpulse_alert_events
SET resolved_at = coalesce(%(now)s::timestamptz, now())
WHERE rule = %(rule)s
  AND job_id IS NULL
  AND resolved_at IS NULL
RETURNING id;

-- name: claim_deliveries
-- Claim at most %(limit)s pending deliveries that are due and not leased (or whose lease
-- expired: the node that held them died or stalled), for node %(node)s: a lease of the
-- notifier's own timeout plus %(margin)s seconds, a new fencing token, one more attempt. SKIP
-- LOCKED: nodes claiming at once never wait for each other. The events of one job (or of the
-- cluster) reach one notifier in the order they fired: a delivery is not claimed while an
-- earlier event's delivery to the same notifier is pending (in flight or waiting to retry),
-- so a "resolved" never overtakes the "firing" it closes. Returns each delivery with its
-- event (resolved_at: its state now, as the delivery must say it), job and notifier.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), due AS (
    SELECT d.id
    FROM pgpulse_alert_deliveries d
    JOIN pgpulse_alert_events e ON e.id = d.event_id
    CROSS JOIN clock
    WHERE d.status = 'pending'
      AND d.next_attempt_at <= clock.now
      AND (d.lease_expires_at IS NULL OR d.lease_expires_at < clock.now)
      AND NOT EXISTS (SELECT 1
                      FROM pgpulse_alert_deliveries b
                      JOIN pgpulse_alert_events be ON be.id = b.event_id
                      WHERE b.status = 'pending'
                        AND b.notifier_id = d.notifier_id
                        AND b.event_id < d.event_id
                        AND be.job_id IS NOT DISTINCT FROM e.job_id)
    ORDER BY d.next_attempt_at
    LIMIT %(limit)s
    FOR UPDATE OF d SKIP LOCKED
), claimed AS (
    UPDATE pgpulse_alert_deliveries d
    SET locked_by = %(node)s,
        lease_expires_at = clock.now + make_interval(
            secs => coalesce((n.config ->> 'timeout')::float8, 30) + %(margin)s),
        fencing_token = d.fencing_token + 1,
        attempts = d.attempts + 1
    FROM due, clock, pgpulse_notifiers n
    WHERE d.id = due.id
      AND n.id = d.notifier_id
    RETURNING d.id, d.event_id, d.notifier_id, d.fencing_token, d.attempts
)
SELECT c.id, c.fencing_token, c.attempts, n.name AS notifier, n.kind, n.config,
       e.id AS event_id, e.dedupe_key, e.rule, e.fired_at, e.scheduled_for, e.run_id, e.error,
       e.details, e.resolved_at, e.job_id, j.tenant, j.name
FROM claimed c
JOIN pgpulse_alert_events e ON e.id = c.event_id
JOIN pgpulse_notifiers n ON n.id = c.notifier_id
LEFT JOIN pgpulse_jobs j ON j.id = e.job_id;

-- name: finish_delivery
-- Record one attempt of delivery %(id)s, fenced by %(token)s (a node that lost the lease
-- changes nothing): 'delivered', 'failed' (final), or 'pending' again in %(retry_in)s seconds.
-- waiting: a later event of the same job (or of the cluster) to the same notifier is pending
-- behind this one (claim_deliveries sends it only once this one has ended).
UPDATE pgpulse_alert_deliveries d
SET status = %(status)s,
    next_attempt_at = coalesce(%(now)s::timestamptz, now())
                      + make_interval(secs => coalesce(%(retry_in)s::float8, 0)),
    locked_by = NULL,
    lease_expires_at = NULL,
    last_status = %(last_status)s,
    last_error = %(error)s,
    finished_at = CASE WHEN %(status)s <> 'pending' THEN coalesce(%(now)s::timestamptz, now()) END
WHERE id = %(id)s
  AND fencing_token = %(token)s
  AND status = 'pending'
RETURNING d.id,
          EXISTS (SELECT 1
                  FROM pgpulse_alert_deliveries w
                  JOIN pgpulse_alert_events we ON we.id = w.event_id
                  JOIN pgpulse_alert_events e ON e.id = d.event_id
                  WHERE w.status = 'pending'
                    AND w.notifier_id = d.notifier_id
                    AND w.event_id > d.event_id
                    AND we.job_id IS NOT DISTINCT FROM e.job_id) AS waiting;

-- name: add_notifier
-- Create or replace notifier %(name)s, of tenant %(tenant)s (NULL: the cluster's). A
-- replacement keeps the tenants it is shared with.
INSERT INTO pgpulse_notifiers (name, kind, config, tenant)
VALUES (%(name)s, %(kind)s, %(config)s, %(tenant)s)
ON CONFLICT (name) DO UPDATE
SET kind = excluded.kind, config = excluded.config, tenant = excluded.tenant, updated_at = now()
RETURNING id, (xmax = 0) AS created;

-- name: share_notifier
-- Share notifier %(name)s with tenants %(add)s and withdraw it from tenants %(remove)s.
UPDATE pgpulse_notifiers
SET shared_with = ARRAY(SELECT DISTINCT t
                        FROM unnest(shared_with || %(add)s::text[]) AS t
                        WHERE t <> ALL (%(remove)s::text[])
                        ORDER BY t),
    updated_at = now()
WHERE name = %(name)s
RETURNING id, shared_with;

-- name: list_notifiers
SELECT id, name, kind, tenant, shared_with, config, created_at, updated_at
FROM pgpulse_notifiers
ORDER BY name;

-- name: notifiers_by_name
-- The notifiers named %(names)s with whom they belong to and are shared with, locked against
-- removal (and a change of their sharing) until the transaction ends.
SELECT id, name, kind, tenant, shared_with
FROM pgpulse_notifiers
WHERE name = ANY (%(names)s::text[])
FOR SHARE;

-- name: remove_notifier
-- Remove notifier %(name)s unless a rule names it. Returns the rules that do (nothing removed),
-- each as its kind and its job's tenant and name (NULL: the cluster's), or the removed id.
WITH target AS (
    SELECT id FROM pgpulse_notifiers WHERE name = %(name)s FOR UPDATE
), users AS (
    SELECT r.id, r.rule, j.tenant, j.name
    FROM pgpulse_alert_rules r
    JOIN target ON target.id = ANY (r.notifiers)
    LEFT JOIN pgpulse_jobs j ON j.id = r.job_id
), removed AS (
    DELETE FROM pgpulse_notifiers n
    USING target
    WHERE n.id = target.id
      AND NOT EXISTS (SELECT 1 FROM users)
    RETURNING n.id
)
SELECT (SELECT id FROM target) AS id,
       (SELECT id FROM removed) AS removed,
       coalesce((SELECT json_agg(json_build_object('rule', u.rule, 'tenant', u.tenant,
                                                   'job', u.name)
                                 ORDER BY u.name NULLS FIRST, u.rule)
                 FROM users u), '[]') AS users;

-- name: set_rule
INSERT INTO pgpulse_alert_rules (job_id, rule, threshold, notifiers)
VALUES (%(job_id)s, %(rule)s, %(threshold)s, %(notifiers)s)
ON CONFLICT (coalesce(job_id, 0), rule) DO UPDATE
SET threshold = excluded.threshold, notifiers = excluded.notifiers
RETURNING id, (xmax = 0) AS created;

-- name: remove_rule
DELETE FROM pgpulse_alert_rules
WHERE coalesce(job_id, 0) = coalesce(%(job_id)s::bigint, 0)
  AND rule = %(rule)s
RETURNING id;

-- name: list_rules
SELECT r.id, r.job_id, j.tenant, j.name AS job, r.rule, r.threshold,
       ARRAY(SELECT n.name FROM pgpulse_notifiers n WHERE n.id = ANY (r.notifiers)
             ORDER BY n.name) AS notifiers
FROM pgpulse_alert_rules r
LEFT JOIN pgpulse_jobs j ON j.id = r.job_id
WHERE %(job_id)s::bigint IS NULL OR r.job_id = %(job_id)s OR r.job_id IS NULL
ORDER BY r.job_id NULLS FIRST, r.rule;

-- name: list_alerts
-- Recent alert events, newest first, with their deliveries (of one job, or all; only open ones;
-- or the one event %(alert_id)s).
SELECT e.id, e.rule, e.job_id, j.tenant, j.name AS job, e.scheduled_for, e.fired_at, e.error,
       e.details, e.silenced, e.resolved_at, e.acknowledged_at, e.acknowledged_by,
       CASE WHEN e.resolved_at IS NOT NULL THEN 'resolved'
            WHEN e.acknowledged_at IS NOT NULL THEN 'acknowledged'
            ELSE 'open' END AS state,
       coalesce((SELECT json_agg(json_build_object(
                     'notifier', n.name, 'status', d.status, 'attempts', d.attempts,
                     'last_status', d.last_status, 'last_error', d.last_error,
                     'finished_at', d.finished_at, 'next_attempt_at', d.next_attempt_at)
                     ORDER BY n.name)
                 FROM pgpulse_alert_deliveries d
                 JOIN pgpulse_notifiers n ON n.id = d.notifier_id
                 WHERE d.event_id = e.id), '[]') AS deliveries
FROM pgpulse_alert_events e
LEFT JOIN pgpulse_jobs j ON j.id = e.job_id
WHERE (%(job_id)s::bigint IS NULL OR e.job_id = %(job_id)s)
  AND (%(alert_id)s::bigint IS NULL OR e.id = %(alert_id)s)
  AND (NOT %(open)s::bool OR e.resolved_at IS NULL)
ORDER BY e.id DESC
LIMIT %(limit)s;

-- name: acknowledge_alert
-- The first acknowledgement is kept. A notice (leader_changed, no_live_node, db_clock: something
-- that happened, with no condition to wait for) is closed by its acknowledgement.
UPDATE pgpulse_alert_events
SET acknowledged_at = coalesce(acknowledged_at, coalesce(%(now)s::timestamptz, now())),
    acknowledged_by = coalesce(acknowledged_by, %(by)s),
    resolved_at = CASE WHEN rule IN ('leader_changed', 'no_live_node', 'db_clock')
                       THEN coalesce(resolved_at, acknowledged_at,
                                     coalesce(%(now)s::timestamptz, now()))
                       ELSE resolved_at END
WHERE id = %(id)s
RETURNING id, resolved_at, acknowledged_at;

-- name: add_silence
INSERT INTO pgpulse_alert_silences (job_id, starts_at, ends_at, reason)
SELECT %(job_id)s, clock.now, clock.now + make_interval(secs => %(seconds)s), %(reason)s
FROM (SELECT coalesce(%(now)s::timestamptz, now()) AS now) clock
RETURNING id, job_id, starts_at, ends_at, reason;

-- name: list_silences
SELECT s.id, s.job_id, j.tenant, j.name AS job, s.starts_at, s.ends_at, s.reason
FROM pgpulse_alert_silences s
LEFT JOIN pgpulse_jobs j ON j.id = s.job_id
WHERE s.ends_at > coalesce(%(now)s::timestamptz, now())
ORDER BY s.ends_at;

-- name: end_silence
-- End silence %(id)s now, if it is in force or still to come (its row stays, as history: its
-- end is moved to now). Returns it with its job's tenant and name; no row: no such silence.
UPDATE pgpulse_alert_silences s
SET ends_at = greatest(s.starts_at, clock.now)
FROM (SELECT coalesce(%(now)s::timestamptz, now()) AS now) clock
WHERE s.id = %(id)s
  AND s.ends_at > clock.now
RETURNING s.id, s.job_id, s.starts_at, s.ends_at, s.reason,
          (SELECT j.tenant FROM pgpulse_jobs j WHERE j.id = s.job_id) AS tenant,
          (SELECT j.name FROM pgpulse_jobs j WHERE j.id = s.job_id) AS job;

-- name: cluster_outage
-- Sent by a starting node before it registers (registering overwrites its own row's last
-- heartbeat): when no node is live now (a node is live until it stops, or its heartbeat is older
-- than its time-to-live), the last heartbeat any node sent, and now; otherwise no row. Only when
-- a no_live_node rule is set: without one, nothing is read.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
SELECT max(n.last_heartbeat) AS since, clock.now AS until
FROM pgpulse_nodes n, clock
WHERE EXISTS (SELECT 1 FROM pgpulse_alert_rules r
              WHERE r.rule = 'no_live_node' AND r.job_id IS NULL)
  AND NOT EXISTS (SELECT 1 FROM pgpulse_nodes l
                  WHERE l.state <> 'stopped'
                    AND l.last_heartbeat > clock.now - make_interval(secs => coalesce(l.ttl, 10)))
GROUP BY clock.now
HAVING max(n.last_heartbeat) IS NOT NULL;

-- name: checkin_targets
-- Every check-in rule (job_id NULL: the default of every job without its own) with the config of
-- each checkin notifier it names, secrets included: for the node's pinger only.
SELECT r.job_id, n.name, n.config
FROM pgpulse_alert_rules r
CROSS JOIN LATERAL unnest(r.notifiers) AS wanted (id)
JOIN pgpulse_notifiers n ON n.id = wanted.id
WHERE r.rule = 'checkin'
  AND n.kind = 'checkin'
ORDER BY r.job_id NULLS FIRST, n.name;

-- name: job_rules
-- The own rules of jobs %(job_ids)s (not the defaults), each with its notifiers' names.
SELECT r.job_id, r.rule, r.threshold,
       ARRAY(SELECT n.name FROM unnest(r.notifiers) WITH ORDINALITY AS w (id, k)
             JOIN pgpulse_notifiers n ON n.id = w.id
             ORDER BY w.k) AS notifiers
FROM pgpulse_alert_rules r
WHERE r.job_id = ANY (%(job_ids)s::bigint[])
ORDER BY r.job_id, r.rule;

-- name: remove_job_rules_except
-- Remove job %(job_id)s's own rules but those of kinds %(keep)s (a definitions file that
-- declares the job's rules owns them all).
DELETE FROM pgpulse_alert_rules
WHERE job_id = %(job_id)s
  AND NOT (rule = ANY (%(keep)s::text[]))
RETURNING id;
