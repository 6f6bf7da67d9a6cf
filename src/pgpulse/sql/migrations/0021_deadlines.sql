-- Completion deadlines: a job's deadline (seconds after an occurrence's scheduled_for; for a
-- backfilled one, after it was queued) by which each occurrence must have succeeded, and the
-- deadline rule kind that fires once per occurrence past it (alert_deadline in alerts.sql).
-- A column without a default and an index on the few rows that set it: no table rewrite.
ALTER TABLE pgpulse_jobs ADD COLUMN deadline interval
    CHECK (deadline >= interval '1 second');

-- The leader's evaluation reads the jobs with a deadline whose current occurrence is due or
-- running (scheduled_for in the past), not every job (alert_deadline).
CREATE INDEX pgpulse_jobs_deadline ON pgpulse_jobs (scheduled_for)
    WHERE deadline IS NOT NULL;

-- pgpulse_alert_rules holds a handful of rows: re-adding its CHECK scans nothing to speak of.
ALTER TABLE pgpulse_alert_rules DROP CONSTRAINT pgpulse_alert_rules_rule_check;
ALTER TABLE pgpulse_alert_rules ADD CONSTRAINT pgpulse_alert_rules_rule_check
    CHECK (rule IN ('failures', 'late', 'skipped', 'missed', 'silence', 'recovered', 'checkin',
                    'deadline', 'node_died', 'leader_changed', 'lag', 'no_live_node',
                    'split_brain', 'db_clock'));
