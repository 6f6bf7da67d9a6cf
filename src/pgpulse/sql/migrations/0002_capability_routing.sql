-- Capability routing: a node claims only the jobs it can run.
--
-- pgpulse_nodes.shell says how the node treats `shell` jobs: 'off' (not allowed: 'shell' is not
-- in its handlers), 'run' (--allow-shell-jobs) or 'dry-run' (--shell-dry-run: the command is
-- recorded, not run). A constant default: no rewrite of the table.
ALTER TABLE pgpulse_nodes
    ADD COLUMN shell text NOT NULL DEFAULT 'off' CHECK (shell IN ('off', 'run', 'dry-run'));

-- The due index leads with the handler. A node's claim walks this index once per handler it
-- has (handler = h, next_run_at <= now, its shards for h), so its cost never depends on how
-- many due jobs of other handlers wait: a job that no live node can run stays due, at the head
-- of the old (next_run_at, shard_id) index, and every claim of every node would have stepped
-- over it. The index keeps its name; nodes of schema 1 still claim (their statement orders by
-- next_run_at over every handler, now found by a scan of this index: slower with many idle
-- jobs, for the minutes of a rolling deploy). Built under the migration's lock: a table of a
-- million jobs is blocked for writes for a few seconds.
DROP INDEX pgpulse_jobs_due;
CREATE INDEX pgpulse_jobs_due ON pgpulse_jobs (handler, next_run_at, shard_id)
    WHERE status = 'idle';
