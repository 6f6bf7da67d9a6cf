-- The shard count becomes a setting of the database, so more than 64 nodes per
-- handler can own work. A job's shard is id % shard_count. This migration changes no row and
-- builds no index: it takes its locks for a catalog change only, whatever the table holds.
--
-- At 64 (the default, and every database before this migration) the claim reads the stored
-- shard_id column (id % 64, migration 0001) through pgpulse_jobs_due, as before. Any other count
-- is read through an expression index, pgpulse_jobs_due_<count> on
-- (handler, next_run_at, (id % <count>)::smallint), and pgpulse_occurrences_due_<count> for the
-- extra occurrences, which `pgpulse shards set <count>` builds CONCURRENTLY (no rewrite, writes
-- keep going) before it publishes the count here (pgpulse.resharding; docs/scaling.md).
CREATE TABLE pgpulse_cluster (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),  -- a single row
    shard_count  integer NOT NULL DEFAULT 64 CHECK (shard_count BETWEEN 1 AND 32768),
    changed_at   timestamptz NOT NULL DEFAULT now()
);
INSERT INTO pgpulse_cluster DEFAULT VALUES;

-- The shard count the node's shards (its last heartbeat's) are of: a count change is complete
-- once every live node reports the new one (NULL: a node of an older release, or none yet).
ALTER TABLE pgpulse_nodes ADD COLUMN shard_count integer;
