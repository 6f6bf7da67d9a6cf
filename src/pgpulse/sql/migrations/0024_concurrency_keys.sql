-- Limits shared across jobs, and priority (docs/policies.md, "Concurrency keys and priority").
-- A job may name a concurrency key; a limit (tenant, key, max_running) bounds how many
-- occurrences of all the tenant's jobs with that key hold a lease at once, across every node.
-- The claim locks the limit row (SKIP LOCKED) and counts the key's leases from the job and
-- occurrence rows themselves, so there is no counter to drift; `claims` is a version number the
-- claim bumps, by which a claimer whose snapshot predates another's claim of the key sees that it
-- does (claim_jobs, claim_occurrences). Nodes of the previous release keep working beside it
-- during a rolling deploy, but claim keyed jobs without their limit: set limits once every node
-- runs this release (docs/upgrading.md).
CREATE TABLE pgpulse_limits (
    tenant      text NOT NULL,
    key         text NOT NULL,
    max_running integer NOT NULL CHECK (max_running BETWEEN 1 AND 100000),
    claims      bigint NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, key)
);

-- Constant defaults: no table rewrite.
ALTER TABLE pgpulse_jobs
    ADD COLUMN concurrency_key text,
    ADD COLUMN priority integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 1000);

-- The jobs of a key (limit list counts them). Only keyed rows are in it, so a job without a
-- key never writes an entry.
CREATE INDEX pgpulse_jobs_key ON pgpulse_jobs (tenant, concurrency_key)
    WHERE concurrency_key IS NOT NULL;

-- The keyed job rows holding a lease: counting a key's running job rows reads only those.
CREATE INDEX pgpulse_jobs_key_running ON pgpulse_jobs (tenant, concurrency_key)
    WHERE concurrency_key IS NOT NULL AND lease_expires_at IS NOT NULL;

-- The idle jobs with a priority, highest first: the claim's second probe per route. Jobs of the
-- default priority 0 are not in it.
CREATE INDEX pgpulse_jobs_due_priority ON pgpulse_jobs (handler, priority DESC, next_run_at, shard_id)
    WHERE status = 'idle' AND priority > 0;

-- How many leases the jobs of key (tenant, key) hold now: job rows claimed and extra
-- occurrences claimed, each counted once (a claimed job row that forks releases its lease as the
-- pending occurrence appears). The job rows through pgpulse_jobs_key_running (the key's running
-- rows only); the extra occurrences from the leased ones (pgpulse_occurrences_leases: at most as
-- many as the cluster's slots), each job looked up by its id. Its cost grows with what runs,
-- never with the key's jobs or with history. STABLE: it reads the calling statement's snapshot,
-- which the claims keep exact by checking the limit row's version (fragment key_room). A
-- function so that the claims, the status reads and the dashboard count one way.
CREATE FUNCTION pgpulse_key_running(tenant text, key text) RETURNS bigint
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    AS $$
SELECT (SELECT count(*) FROM pgpulse_jobs AS j
        WHERE j.tenant = $1 AND j.concurrency_key = $2 AND j.lease_expires_at IS NOT NULL)
     + (SELECT count(*) FROM pgpulse_occurrences AS o
        WHERE o.lease_expires_at IS NOT NULL
          AND (SELECT j.concurrency_key FROM pgpulse_jobs AS j
               WHERE j.id = o.job_id AND j.tenant = $1) = $2)
$$;

-- Whether key (tenant, key) has a limit and its jobs hold that many leases or more, as the
-- calling statement's snapshot sees it: the claims' filter (fragment key_open).
CREATE FUNCTION pgpulse_key_full(tenant text, key text) RETURNS boolean
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    AS $$
SELECT EXISTS (SELECT 1 FROM pgpulse_limits AS l
               WHERE l.tenant = $1 AND l.key = $2
                 AND pgpulse_key_running($1, $2) >= l.max_running)
$$;

-- Whether idle job (id, max_concurrency, tenant, key) may be claimed as far as its limits go, as
-- the calling statement's snapshot sees them: under overlap allow, fewer forked occurrences than
-- max_concurrency; and its concurrency key not at its limit. The claim's filter (fragment
-- job_open), called only for a job that has one of the two: a job with neither calls nothing.
CREATE FUNCTION pgpulse_job_open(id bigint, max_concurrency integer, tenant text, key text)
    RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
SELECT ($2 IS NULL
        OR (SELECT count(*) FROM pgpulse_occurrences AS o
            WHERE o.job_id = $1 AND o.kind = 'scheduled') < $2)
   AND ($4 IS NULL OR NOT pgpulse_key_full($3, $4))
$$;
