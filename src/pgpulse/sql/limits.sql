-- The limits of concurrency keys (pgpulse_limits, migration 0023; docs/policies.md,
-- "Concurrency keys and priority"), loaded into pgpulse.sql.QUERIES beside queries.sql. The
-- claims read them (claim_jobs, claim_occurrences: fragments key_open, key_room); these
-- statements write and list them.

-- name: put_limit
-- Create or change the limit of key (%(tenant)s, %(key)s) to %(max_running)s. An update takes
-- the row's lock, so it waits for a claim that holds it (a claim step is short) and the claims
-- after it see the new limit. Occurrences running beyond a lowered limit run on; none starts
-- until the key's leases are below it. Returns whether it was created.
INSERT INTO pgpulse_limits AS l (tenant, key, max_running)
VALUES (%(tenant)s, %(key)s, %(max_running)s)
ON CONFLICT (tenant, key) DO UPDATE
SET max_running = excluded.max_running, updated_at = now()
RETURNING l.xmax = 0 AS created;

-- name: list_limits
-- The limits (of %(tenant)s, or every tenant's) by tenant and key, each with the leases its
-- jobs hold now (running), how many jobs name the key (jobs) and how many of those are idle and
-- due (waiting). Read through pgpulse_jobs_key: its cost grows with the keys' jobs only.
SELECT l.tenant, l.key, l.max_running, pgpulse_key_running(l.tenant, l.key) AS running,
       (SELECT count(*) FROM pgpulse_jobs AS j
        WHERE j.tenant = l.tenant AND j.concurrency_key = l.key) AS jobs,
       (SELECT count(*) FROM pgpulse_jobs AS j
        WHERE j.tenant = l.tenant AND j.concurrency_key = l.key AND j.status = 'idle'
          AND j.next_run_at <= now()) AS waiting
FROM pgpulse_limits AS l
WHERE %(tenant)s::text IS NULL OR l.tenant = %(tenant)s
ORDER BY l.tenant, l.key;

-- name: delete_limit
-- Delete the limit of key (%(tenant)s, %(key)s): its jobs are no longer limited (they keep
-- the key, which a later limit applies to again). Returns the row deleted, if any.
DELETE FROM pgpulse_limits
WHERE tenant = %(tenant)s AND key = %(key)s
RETURNING key;
