-- A node is healthy only if its claims succeed, not only its heartbeat (a node whose heartbeat
-- works but whose claims fail runs nothing): each heartbeat records the database instant of the
-- node's last claim step that succeeded, and the error of its last claim step if that one failed
-- (NULL once a step succeeds again). `status` and the dashboard call a live node whose last claim
-- failed 'unhealthy', with the error.
ALTER TABLE pgpulse_nodes
    ADD COLUMN last_claim_at timestamptz,
    ADD COLUMN claim_error text;
