-- Issue 37's cluster rules, raised by a node rather than by alert_evaluate: split_brain (more
-- than one host of the node's multi-host DSN accepts writes) and db_clock (the database's clock
-- stepped, measured by the leader against its own monotonic clock).
-- pgpulse_alert_rules holds a handful of rows: re-adding its CHECK scans nothing to speak of.

ALTER TABLE pgpulse_alert_rules DROP CONSTRAINT pgpulse_alert_rules_rule_check;
ALTER TABLE pgpulse_alert_rules ADD CONSTRAINT pgpulse_alert_rules_rule_check
    CHECK (rule IN ('failures', 'late', 'skipped', 'missed', 'silence', 'recovered', 'checkin',
                    'node_died', 'leader_changed', 'lag', 'no_live_node', 'split_brain',
                    'db_clock'));
