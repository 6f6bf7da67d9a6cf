-- Issue 20's remaining rules (docs/alerts.md, "Rules"): a job's check-in rule (its attempts ping
-- the rule's checkin notifiers at start, success and failure), the cluster rule no_live_node
-- (the cluster had no live node for S seconds), and what the cluster rules remember between
-- evaluations, so that leader_changed fires on a change only.
-- pgpulse_alert_rules holds a handful of rows: re-adding its CHECK scans nothing to speak of.

ALTER TABLE pgpulse_alert_rules DROP CONSTRAINT pgpulse_alert_rules_rule_check;
ALTER TABLE pgpulse_alert_rules ADD CONSTRAINT pgpulse_alert_rules_rule_check
    CHECK (rule IN ('failures', 'late', 'skipped', 'missed', 'silence', 'recovered', 'checkin',
                    'node_died', 'leader_changed', 'lag', 'no_live_node'));

-- What a cluster rule last observed (rule leader_changed: the leader's node id), written by the
-- leader's evaluation only when it changes. The first leader a rule sees is recorded here, not
-- as an event: there was no leader before, so nothing changed.
CREATE TABLE pgpulse_alert_state (
    rule       text PRIMARY KEY CHECK (rule IN ('leader_changed')),
    value      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Carry over the leader the last leader_changed event named, then drop the events that recorded
-- a first leader (no previous one): they never had a delivery, and no change happened.
INSERT INTO pgpulse_alert_state (rule, value, updated_at)
SELECT 'leader_changed', e.details ->> 'leader', e.fired_at
FROM pgpulse_alert_events e
WHERE e.rule = 'leader_changed'
  AND e.job_id IS NULL
  AND e.details ->> 'leader' IS NOT NULL
ORDER BY e.id DESC
LIMIT 1;
DELETE FROM pgpulse_alert_events
WHERE rule = 'leader_changed'
  AND job_id IS NULL
  AND details ->> 'previous' IS NULL;
