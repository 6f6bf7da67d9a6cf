-- The statements of a shard-count change (pgpulse.resharding, docs/scaling.md), as named blocks.
-- {count} is the shard count, an integer the caller checked (DDL takes no parameters).

-- name: build_jobs_due_index
-- The claim's path at {count} shards: pgpulse_jobs_due's columns, with the shard as the
-- expression the claim names at that count (sql.at_shard_count). CONCURRENTLY: the build reads
-- the table without blocking its writes (claims and outcomes go on), and changes no row.
CREATE INDEX CONCURRENTLY pgpulse_jobs_due_{count}
    ON pgpulse_jobs (handler, next_run_at, ((id % {count})::smallint))
    WHERE status = 'idle';

-- name: build_jobs_due_priority_index
-- The claim's second probe at {count} shards (pgpulse_jobs_due_priority's columns, the shard as
-- above): without it the priority scan would read every due row of a handler through
-- pgpulse_jobs_due_{count} and sort them.
CREATE INDEX CONCURRENTLY pgpulse_jobs_due_priority_{count}
    ON pgpulse_jobs (handler, priority DESC, next_run_at, ((id % {count})::smallint))
    WHERE status = 'idle' AND priority > 0;

-- name: build_occurrences_due_index
-- The same for the extra occurrences (pgpulse_occurrences_due at {count} shards).
CREATE INDEX CONCURRENTLY pgpulse_occurrences_due_{count}
    ON pgpulse_occurrences (next_run_at, ((job_id % {count})::smallint))
    WHERE lease_expires_at IS NULL;

-- name: analyze_sharded_tables
-- Statistics of the new index's shard expression, before any node plans a claim with it: a
-- node's claim session plans generically (claims.CLAIM_SESSION_SETTINGS), and without them the
-- planner may prefer pgpulse_jobs_due and read the shard from the heap, every shard's due row.
-- Samples the tables (no rewrite, no lock against writes).
ANALYZE pgpulse_jobs, pgpulse_occurrences;

-- name: drop_jobs_due_index
DROP INDEX CONCURRENTLY IF EXISTS pgpulse_jobs_due_{count};

-- name: drop_jobs_due_priority_index
DROP INDEX CONCURRENTLY IF EXISTS pgpulse_jobs_due_priority_{count};

-- name: drop_occurrences_due_index
DROP INDEX CONCURRENTLY IF EXISTS pgpulse_occurrences_due_{count};

-- name: shard_indexes
-- The shard-count indexes that exist, and whether each is valid (a CONCURRENTLY build that
-- failed or was interrupted leaves an invalid one behind, which the next build replaces).
SELECT c.relname AS name, i.indisvalid AS valid
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
WHERE c.relname ~ '^pgpulse_(jobs_due|jobs_due_priority|occurrences_due)_[0-9]+$'
  AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'pgpulse_jobs'::regclass);

-- name: shard_state
-- The database's shard count, and the count each live node (heartbeat within %(ttl)s seconds)
-- reports its shards of.
SELECT c.shard_count, c.changed_at,
       coalesce((SELECT json_object_agg(n.node_id, n.shard_count)
                 FROM pgpulse_nodes AS n
                 WHERE n.state = 'alive'
                   AND n.last_heartbeat > now() - make_interval(secs => %(ttl)s)), '{}') AS nodes
FROM pgpulse_cluster AS c;

-- name: publish_shard_count
-- Publish the new count: each node places and claims by it from its next heartbeat.
UPDATE pgpulse_cluster
SET shard_count = %(count)s, changed_at = now()
RETURNING shard_count, changed_at;
