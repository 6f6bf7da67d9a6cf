-- Statements of the demo (pgpulse demo): its own evidence table and its report.

-- name: create_log
-- Every handler execution that reached its end, written from inside the handler: the demo's
-- independent witness against duplicates (pgpulse_runs alone could not show one).
CREATE TABLE IF NOT EXISTS pgpulse_demo_log (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        bigint NOT NULL,
    scheduled_for timestamptz NOT NULL,
    attempt       integer NOT NULL,
    fencing_token bigint NOT NULL,
    node_id       text NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- name: log_execution
INSERT INTO pgpulse_demo_log (job_id, scheduled_for, attempt, fencing_token, node_id)
VALUES (%(job_id)s, %(scheduled_for)s, %(attempt)s, %(token)s, %(node)s);

-- name: next_job_id
-- The id the next job created gets (the demo spreads its jobs over the nodes' shards).
SELECT setval(pg_get_serial_sequence('pgpulse_jobs', 'id'), %(id)s, false);

-- name: nodes_ready
-- Every demo node alive and the shards shared out: each polls only its own.
SELECT count(*) = %(n)s AND sum(cardinality(shards)) = 64 AS ready
FROM pgpulse_nodes
WHERE state = 'alive' AND last_heartbeat > now() - interval '3 seconds';

-- name: progress
SELECT node_id, count(*) AS runs FROM pgpulse_demo_log GROUP BY node_id ORDER BY node_id;

-- name: holder_of_running
-- A node running a job right now (the billing rollup if it is running), and the job.
SELECT locked_by, name FROM pgpulse_jobs
WHERE status = 'running' ORDER BY (name LIKE '%%billing%%') DESC, id LIMIT 1;

-- name: report
-- Per job: runs by outcome, executions witnessed, duplicated occurrences, nodes that ran it.
SELECT j.id, j.tenant, j.name, j.schedule, j.timezone, j.catch_up, j.anchor_at, j.scheduled_for,
       (SELECT count(*) FROM pgpulse_runs r WHERE r.job_id = j.id AND r.outcome = 'succeeded'
          AND r.scheduled_for <= %(cutoff)s) AS succeeded,
       (SELECT coalesce(sum(r.occurrences), 0) FROM pgpulse_runs r
         WHERE r.job_id = j.id AND r.outcome = 'skipped'
           AND r.scheduled_for <= %(cutoff)s) AS skipped,
       (SELECT count(*) FROM pgpulse_runs r WHERE r.job_id = j.id AND r.attempts > 1
          AND r.outcome = 'succeeded') AS retried,
       (SELECT array_agg(r.scheduled_for ORDER BY r.scheduled_for) FROM pgpulse_runs r
         WHERE r.job_id = j.id AND r.outcome IN ('succeeded', 'skipped')
           AND r.scheduled_for <= %(cutoff)s) AS accounted,
       -- skipped summary rows: [first, last] of the occurrences each stands for
       (SELECT array_agg(ARRAY[r.scheduled_for, r.last_scheduled_for]) FROM pgpulse_runs r
         WHERE r.job_id = j.id AND r.last_scheduled_for IS NOT NULL
           AND r.scheduled_for <= %(cutoff)s) AS summarised,
       (SELECT count(*) FROM (SELECT 1 FROM pgpulse_demo_log l WHERE l.job_id = j.id
                              GROUP BY l.scheduled_for HAVING count(*) > 1) d) AS duplicates,
       (SELECT string_agg(node_id || ': ' || n, ', ' ORDER BY node_id)
          FROM (SELECT l.node_id, count(*) AS n FROM pgpulse_demo_log l
                WHERE l.job_id = j.id AND l.scheduled_for <= %(cutoff)s
                GROUP BY l.node_id) per_node) AS nodes
FROM pgpulse_jobs j
ORDER BY j.tenant, j.name;

-- name: takeovers
-- Occurrences that a second node finished after the first one's lease was lost.
SELECT j.name, r.scheduled_for, r.attempts, r.node_id
FROM pgpulse_runs r JOIN pgpulse_jobs j ON j.id = r.job_id
WHERE r.attempts > 1 AND r.outcome = 'succeeded'
ORDER BY r.scheduled_for;
