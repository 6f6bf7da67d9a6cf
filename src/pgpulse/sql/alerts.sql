-- Alerts' statements (pgpulse.alerts; docs/alerts.md): evaluation, delivery claims and their
-- fenced outcomes, and the reads and writes of notifiers, rules, events and silences.

-- name: alert_evaluate
-- One evaluation of every rule, in one statement (any node may send it at any time: the events'
-- unique dedupe_key makes concurrent evaluations produce one event each). Candidates:
-- * failures: a run that ended failed within %(lookback)s seconds and made the job's streak of
--   failed runs (retries that later succeed are not failed runs) exactly N long: one event per
--   streak, keyed by that run's occurrence. The streak is the runs in the order they were
--   recorded (the (job_id, id DESC) index), not by occurrence: a backfill of older occurrences
--   that fails inside a streak continues it rather than starting one;
-- * skipped: a run row of skipped occurrences that ended within the look-back;
-- * late: an idle job whose current occurrence was not started S seconds after it was due;
-- * missed: the same for a backfill job (an occurrence it owes still not run after S seconds);
-- * silence: no successful run within W seconds (since the last success, else since the job was
--   created), whatever the reason; keyed by that instant, so one event per silent stretch;
-- * recovered: a job with an open alert that succeeded after it fired; its open alerts close;
-- * cluster rules, only when %(leader)s: node_died (a node silent past its ttl that last said it
--   ran attempts; closes when that node is back, stopped or gone), leader_changed (this node
--   leads, and the leader recorded in pgpulse_alert_state is another; every leader records
--   itself, rule or not, and the first one recorded is no change), lag (an idle job due more
--   than S seconds ago; closes when none is);
-- * no_live_node, on any node that passes %(outage_since)s: the cluster had no live node from
--   then until %(outage_until)s (the evaluating node's start), for longer than S seconds.
-- A job's own rule of a kind replaces the default (job_id NULL). An event inside a silence is
-- recorded, silenced, with no delivery; every other new event gets one pending delivery per
-- notifier of its rule (but a checkin notifier: attempts ping it, alerts do not go to it).
-- Returns how many events fired, how many deliveries were queued, and the first due instant of
-- the older pending deliveries. Events are inserted in key order, so
-- two evaluations that race on several keys wait for each other rather than deadlock.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), recent AS (
    SELECT r.id, r.job_id, r.scheduled_for, r.outcome, r.error, r.occurrences,
           r.last_scheduled_for, r.finished_at
    FROM pgpulse_runs r, clock
    WHERE r.finished_at > clock.now - make_interval(secs => %(lookback)s)
      AND r.outcome IN ('failed', 'skipped')
), failures AS (
    SELECT rc.job_id, 'failures'::text AS rule, rc.scheduled_for, rc.id AS run_id,
           rc.error, jsonb_build_object('consecutive_failures', eff.threshold::int) AS details,
           eff.notifiers
    FROM recent rc
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
    WHERE rc.outcome = 'failed'
      AND rc.finished_at >= eff.created_at  -- a new rule does not fire on older failures
      AND streak.failed = coalesce(eff.threshold, 1)
      AND streak.before = 0
), skipped AS (
    SELECT rc.job_id, 'skipped'::text AS rule, rc.scheduled_for, rc.id AS run_id, rc.error,
           jsonb_build_object('occurrences', rc.occurrences,
                              'last_scheduled_for', rc.last_scheduled_for) AS details,
           eff.notifiers
    FROM recent rc
    CROSS JOIN LATERAL (
        SELECT r.notifiers
        FROM pgpulse_alert_rules r
        WHERE r.rule = 'skipped'
          AND (r.job_id = rc.job_id OR r.job_id IS NULL)
        ORDER BY r.job_id NULLS LAST
        LIMIT 1
    ) eff
    WHERE rc.outcome = 'skipped'
), overdue AS (
    SELECT j.id, j.scheduled_for, j.catch_up, j.run_id
    FROM pgpulse_jobs j, clock
    WHERE j.status = 'idle'
      AND j.next_run_at <= clock.now - make_interval(secs => (
              SELECT min(r.threshold) FROM pgpulse_alert_rules r
              WHERE r.rule IN ('late', 'missed')))
      AND j.attempt = 0
    ORDER BY j.next_run_at
    LIMIT %(limit)s
), late AS (
    SELECT o.id AS job_id, eff.rule, o.scheduled_for, o.run_id, NULL::text AS error,
           jsonb_build_object('threshold_seconds', eff.threshold,
                              'late_by_seconds',
                              extract(epoch FROM clock.now - o.scheduled_for)::float8) AS details,
           eff.notifiers
    FROM overdue o, clock
    CROSS JOIN LATERAL (
        SELECT DISTINCT ON (r.rule) r.rule, r.threshold, r.notifiers
        FROM pgpulse_alert_rules r
        WHERE r.rule IN ('late', 'missed')
          AND (r.job_id = o.id OR r.job_id IS NULL)
        ORDER BY r.rule, r.job_id NULLS LAST
    ) eff
    WHERE o.scheduled_for <= clock.now - make_interval(secs => eff.threshold)
      AND (eff.rule = 'late' OR o.catch_up = 'backfill')
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
), silence AS (
    SELECT j.id AS job_id, 'silence'::text AS rule, since.at AS scheduled_for,
           NULL::bigint AS run_id, j.last_error AS error,
           jsonb_build_object('window_seconds', w.threshold, 'since', since.at,
                              'status', j.status) AS details,
           w.notifiers
    FROM watched w
    JOIN pgpulse_jobs j ON j.id = w.job_id
    CROSS JOIN LATERAL (
        SELECT coalesce(
                   CASE WHEN j.last_outcome = 'succeeded' THEN j.last_finished_at END,
                   (SELECT max(p.finished_at) FROM pgpulse_runs p
                    WHERE p.job_id = j.id AND p.outcome = 'succeeded'),
                   j.created_at) AS at
    ) since, clock
    WHERE since.at <= clock.now - make_interval(secs => w.threshold)
), healed AS (
    SELECT e.id, e.job_id, j.last_finished_at, j.run_id
    FROM pgpulse_alert_events e
    JOIN pgpulse_jobs j ON j.id = e.job_id
    WHERE e.resolved_at IS NULL
      AND e.job_id IS NOT NULL
      AND j.last_outcome = 'succeeded'
      AND j.last_finished_at > e.fired_at
), recovered AS (
    SELECT h.job_id, 'recovered'::text AS rule, max(h.last_finished_at) AS scheduled_for,
           NULL::bigint AS run_id, NULL::text AS error,
           jsonb_build_object('resolves', array_agg(h.id ORDER BY h.id)) AS details,
           eff.notifiers
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
), died AS (
    SELECT NULL::bigint AS job_id, 'node_died'::text AS rule, n.last_heartbeat AS scheduled_for,
           NULL::bigint AS run_id, NULL::text AS error,
           jsonb_build_object('node', n.node_id, 'running', n.running,
                              'last_heartbeat', n.last_heartbeat) AS details,
           r.notifiers, 'node/' || n.node_id || '/' || extract(epoch FROM n.started_at)::text AS key
    FROM pgpulse_alert_rules r
    JOIN pgpulse_nodes n ON n.state = 'alive' AND n.running > 0
    CROSS JOIN clock
    WHERE %(leader)s::bool
      AND r.rule = 'node_died'
      AND r.job_id IS NULL
      AND n.last_heartbeat < clock.now - make_interval(secs => coalesce(n.ttl, 10))
), last_leader AS (
    SELECT s.value AS leader, s.updated_at
    FROM pgpulse_alert_state s
    WHERE s.rule = 'leader_changed'
), leader_rule AS (
    SELECT r.notifiers
    FROM pgpulse_alert_rules r
    WHERE %(leader)s::bool
      AND r.rule = 'leader_changed'
      AND r.job_id IS NULL
), leader_seen AS (
    -- this leader, recorded when it is not the one recorded (nothing is written otherwise),
    -- whether a rule is set or not: a rule set just before a failover knows the leader it had
    INSERT INTO pgpulse_alert_state AS s (rule, value, updated_at)
    SELECT 'leader_changed', %(node)s::text, clock.now
    FROM clock
    WHERE %(leader)s::bool
      AND (SELECT l.leader FROM last_leader l) IS DISTINCT FROM %(node)s::text
    ON CONFLICT (rule) DO UPDATE
    SET value = excluded.value, updated_at = excluded.updated_at
    RETURNING s.rule
), leader AS (
    -- a change only: the first leader a rule sees has no previous one, and is no event
    SELECT NULL::bigint AS job_id, 'leader_changed'::text AS rule, NULL::timestamptz,
           NULL::bigint, NULL::text,
           jsonb_build_object('leader', %(node)s::text, 'previous', l.leader) AS details,
           r.notifiers,
           'leader/' || extract(epoch FROM l.updated_at)::text || '/' || %(node)s::text
    FROM leader_rule r
    JOIN last_leader l ON l.leader IS DISTINCT FROM %(node)s::text
), outage AS (
    -- no live node for S seconds: %(outage_since)s is the last heartbeat any node sent before
    -- the evaluating node started, when none was live then (AlertStore.cluster_outage); one
    -- event per gap, keyed by that instant, so nodes starting together fire it once
    SELECT NULL::bigint AS job_id, 'no_live_node'::text AS rule, NULL::timestamptz,
           NULL::bigint, NULL::text,
           jsonb_build_object('since', %(outage_since)s::timestamptz,
                              'until', %(outage_until)s::timestamptz,
                              'gap_seconds', extract(epoch FROM %(outage_until)s::timestamptz
                                                     - %(outage_since)s::timestamptz)::float8,
                              'threshold_seconds', r.threshold,
                              'node', %(node)s::text) AS details,
           r.notifiers,
           'cluster/no_live_node/' || extract(epoch FROM %(outage_since)s::timestamptz)::text
    FROM pgpulse_alert_rules r
    WHERE r.rule = 'no_live_node'
      AND r.job_id IS NULL
      AND %(outage_since)s::timestamptz
          < %(outage_until)s::timestamptz - make_interval(secs => r.threshold)
), revived AS (
    -- node_died alerts whose node is back (its heartbeat is fresh again, under the same id),
    -- stopped, or gone from pgpulse_nodes: they close
    SELECT e.id
    FROM pgpulse_alert_events e
    LEFT JOIN pgpulse_nodes n ON n.node_id = e.details ->> 'node'
    CROSS JOIN clock
    WHERE %(leader)s::bool
      AND e.rule = 'node_died'
      AND e.job_id IS NULL
      AND e.resolved_at IS NULL
      AND (n.node_id IS NULL
           OR n.state = 'stopped'
           OR n.last_heartbeat >= clock.now - make_interval(secs => coalesce(n.ttl, 10)))
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
    WHERE %(leader)s::bool
      AND r.rule = 'lag'
      AND r.job_id IS NULL
), lag AS (
    SELECT NULL::bigint AS job_id, 'lag'::text AS rule, NULL::timestamptz, NULL::bigint,
           NULL::text, jsonb_build_object('lag_seconds', w.lag,
                                          'threshold_seconds', w.threshold) AS details,
           w.notifiers, 'cluster/lag/' || extract(epoch FROM clock.now)::text
    FROM worst w, clock
    WHERE w.lag IS NOT NULL
      AND w.open_id IS NULL
), candidates AS (
    SELECT c.job_id, c.rule, c.scheduled_for, c.run_id, c.error, c.details, c.notifiers,
           'job/' || c.job_id || '/' || c.rule || '/' || extract(epoch FROM c.scheduled_for)::text AS key
    FROM (SELECT * FROM failures
          UNION ALL SELECT * FROM skipped
          UNION ALL SELECT * FROM late
          UNION ALL SELECT * FROM silence
          UNION ALL SELECT * FROM recovered) c
    UNION ALL SELECT * FROM died
    UNION ALL SELECT * FROM leader
    UNION ALL SELECT * FROM lag
    UNION ALL SELECT * FROM outage
), fresh AS (
    INSERT INTO pgpulse_alert_events AS e (dedupe_key, job_id, rule, scheduled_for, run_id,
                                           fired_at, error, details, notifiers, silenced,
                                           resolved_at)
    SELECT c.key, c.job_id, c.rule, c.scheduled_for, c.run_id, clock.now, c.error, c.details,
           c.notifiers,
           EXISTS (SELECT 1 FROM pgpulse_alert_silences s
                   WHERE (s.job_id IS NULL OR s.job_id = c.job_id)
                     AND s.starts_at <= clock.now
                     AND s.ends_at > clock.now),
           -- only recovered is over when it fires; every other event is open (firing, as
           -- its webhook says) until its condition ends or, for a notice, it is acknowledged
           CASE WHEN c.rule = 'recovered' THEN clock.now END
    FROM candidates c, clock
    WHERE NOT EXISTS (SELECT 1 FROM pgpulse_alert_events o WHERE o.dedupe_key = c.key)
    ORDER BY c.key
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING e.id, e.notifiers, e.silenced
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
), closed AS (
    UPDATE pgpulse_alert_events e
    SET resolved_at = clock.now
    FROM clock
    WHERE e.resolved_at IS NULL
      AND (e.id IN (SELECT h.id FROM healed h)
           OR e.id IN (SELECT v.id FROM revived v)
           OR e.id IN (SELECT w.open_id FROM worst w WHERE w.lag IS NULL))
    RETURNING e.id
)
SELECT (SELECT count(*) FROM fresh)::int AS fired,
       (SELECT count(*) FROM queued)::int AS queued,
       (SELECT count(*) FROM closed)::int AS closed,
       (SELECT min(d.next_attempt_at)
        FROM pgpulse_alert_deliveries d
        JOIN pgpulse_alert_events e ON e.id = d.event_id
        WHERE d.status = 'pending'
          -- one waiting behind an earlier event is not due: its turn comes when that one ends
          AND NOT EXISTS (SELECT 1
                          FROM pgpulse_alert_deliveries b
                          JOIN pgpulse_alert_events be ON be.id = b.event_id
                          WHERE b.status = 'pending'
                            AND b.notifier_id = d.notifier_id
                            AND b.event_id < d.event_id
                            AND be.job_id IS NOT DISTINCT FROM e.job_id)) AS next_due,
       clock.now AS db_now
FROM clock;

-- name: alert_raise
-- A cluster event a node observed itself (split_brain, db_clock: nothing in the tables shows
-- them, so alert_evaluate cannot), fired as alert_evaluate fires its own: only if cluster rule
-- %(rule)s is set; once per %(key)s, whichever nodes raise it and however often (the unique
-- dedupe_key); silenced inside a silence of the cluster; one pending delivery per notifier of
-- the rule (but a checkin notifier). Returns the new event's id and how many deliveries it
-- queued; no row when the rule is not set or the key fired already.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), fresh AS (
    INSERT INTO pgpulse_alert_events AS e (dedupe_key, job_id, rule, fired_at, details,
                                           notifiers, silenced)
    SELECT %(key)s, NULL, r.rule, clock.now, %(details)s::jsonb, r.notifiers,
           EXISTS (SELECT 1 FROM pgpulse_alert_silences s
                   WHERE s.job_id IS NULL
                     AND s.starts_at <= clock.now
                     AND s.ends_at > clock.now)
    FROM pgpulse_alert_rules r, clock
    WHERE r.rule = %(rule)s
      AND r.job_id IS NULL
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING e.id, e.notifiers, e.silenced
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
SELECT f.id, (SELECT count(*) FROM queued)::int AS queued
FROM fresh f;

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

-- name: forget_job_alerts
-- A deleted job's rules and silences (its events stay, as history).
WITH rules AS (
    DELETE FROM pgpulse_alert_rules WHERE job_id = %(job_id)s RETURNING id
)
DELETE FROM pgpulse_alert_silences WHERE job_id = %(job_id)s;

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
