-- Pulse schema, version 1: the baseline of release 0.2.0.
-- Every object is named pgpulse_*, so Pulse can share a database (and its search_path) with an
-- application that has tables of its own. The whole current schema, as PostgreSQL reports it,
-- is in ../schema.sql (generated; a test checks that these migrations produce exactly it).
--
-- pgpulse_jobs is the single source of truth: one row per job, holding its definition and the
-- state of its current occurrence. pgpulse_runs keeps one row per occurrence (job_id,
-- scheduled_for). pgpulse_nodes is the registry of scheduler nodes and their heartbeats.

CREATE TABLE pgpulse_jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- (tenant, name) is unique through pgpulse_job_names, not an index here (see below)
    tenant           text NOT NULL,
    name             text NOT NULL,
    -- definition
    schedule         text NOT NULL,
    schedule_kind    text NOT NULL CHECK (schedule_kind IN ('cron', 'interval')),
    timezone         text NOT NULL DEFAULT 'UTC',
    handler          text NOT NULL,
    payload          jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(payload) = 'object'),
    catch_up         text NOT NULL DEFAULT 'skip'
                     CHECK (catch_up IN ('skip', 'backfill', 'coalesce')),
    backfill_limit   integer CHECK (backfill_limit > 0),
    -- at least one second: a claim always comes some milliseconds after an occurrence is due,
    -- so a grace of 0 would skip every occurrence
    misfire_grace    interval NOT NULL DEFAULT '60 seconds'
                     CHECK (misfire_grace >= interval '1 second'),
    max_attempts     integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    retry_backoff    interval NOT NULL DEFAULT '1 second',
    timeout          interval,
    source           text NOT NULL DEFAULT 'api',
    meta             jsonb NOT NULL DEFAULT '{}'::jsonb,
    -- 64 shards; stable_hash(id) = id for an identity column
    shard_id         smallint GENERATED ALWAYS AS ((id % 64)::smallint) STORED,
    -- state of the current occurrence
    status           text NOT NULL DEFAULT 'idle'
                     CHECK (status IN ('idle', 'running', 'paused', 'failed')),
    anchor_at        timestamptz NOT NULL,        -- interval schedules count from here
    scheduled_for    timestamptz NOT NULL,        -- the current occurrence (logical time)
    next_run_at      timestamptz NOT NULL,        -- when it may be claimed (later on a retry)
    attempt          integer NOT NULL DEFAULT 0,  -- attempts made for scheduled_for
    fencing_token    bigint NOT NULL DEFAULT 0,   -- grows on every claim
    -- The id the occurrence's pgpulse_runs row has or will have: drawn from that table's
    -- sequence at the first claim of the occurrence and kept until the job moves to another
    -- occurrence, so a handler knows its run id before the row exists and every attempt of the
    -- occurrence shares it. The row itself is written when an attempt ends (by its node, or by
    -- the sweeper for a lost lease), never at the claim.
    run_id           bigint,
    locked_by        text,
    lease_expires_at timestamptz,
    claimed_at       timestamptz,                 -- the database's instant of the last claim
    last_error       text,
    last_outcome     text,
    last_finished_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK ((status = 'running') = (lease_expires_at IS NOT NULL))
);

-- The hot poll path: only idle rows, ordered by due time. The shard filter is read from the
-- index too, so a claim stops after LIMIT matching entries however large the backlog is.
CREATE INDEX pgpulse_jobs_due ON pgpulse_jobs (next_run_at, shard_id) WHERE status = 'idle';
-- The sweeper's path: running rows by lease expiry.
CREATE INDEX pgpulse_jobs_leases ON pgpulse_jobs (lease_expires_at) WHERE status = 'running';

-- A job's (tenant, name) is unique through this table rather than an index on pgpulse_jobs.
-- A firing updates its job row twice (claim, end of the attempt) and neither update can be HOT
-- (each changes next_run_at or status, which the partial indexes read), so each writes an
-- entry into every index of pgpulse_jobs; a unique (tenant, name) index there would be paid
-- twice per firing and read by no hot statement. Names are written when a job is created (the
-- trigger below, so every INSERT keeps this table whole, bulk loads included), never by a
-- firing. Lookups by name go through its primary key.
CREATE TABLE pgpulse_job_names (
    tenant text NOT NULL,
    name   text NOT NULL,
    job_id bigint NOT NULL UNIQUE REFERENCES pgpulse_jobs (id) ON DELETE CASCADE,
    PRIMARY KEY (tenant, name)
);

-- Names of new jobs, once per statement (a bulk load of 100,000 jobs is one INSERT here). A
-- name taken already raises unique_violation on pgpulse_job_names_pkey, naming (tenant, name),
-- and the statement that inserted the job is rolled back with it.
CREATE FUNCTION pgpulse_job_names_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgpulse_job_names (tenant, name, job_id) SELECT tenant, name, id FROM added;
    RETURN NULL;
END
$$;
CREATE TRIGGER pgpulse_job_names_insert AFTER INSERT ON pgpulse_jobs
REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION pgpulse_job_names_insert();

-- Pulse never renames a job; a rename by hand moves its name along. Fires only for statements
-- that set tenant or name, so never for a claim or the end of an attempt.
CREATE FUNCTION pgpulse_job_names_rename() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgpulse_job_names SET tenant = NEW.tenant, name = NEW.name WHERE job_id = NEW.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER pgpulse_job_names_rename AFTER UPDATE OF tenant, name ON pgpulse_jobs
FOR EACH ROW WHEN ((OLD.tenant, OLD.name) IS DISTINCT FROM (NEW.tenant, NEW.name))
EXECUTE FUNCTION pgpulse_job_names_rename();

-- One row per occurrence: a retry or a take-over after a lost lease is the next attempt of the
-- same row, never a new run. The occurrences one catch-up decision skips, however many (a
-- `* * * * * *` job ten years behind skips 315 million), get one summary row with outcome
-- 'skipped': scheduled_for is the first of them, occurrences how many the row stands for,
-- last_scheduled_for the last (the schedule's occurrences from scheduled_for through
-- last_scheduled_for; an off-schedule, triggered occurrence can only be the first). Every
-- other row stands for its own occurrence alone (occurrences 1, last_scheduled_for NULL).
-- job_id has no foreign key: every firing writes one row here, and a key would check each one
-- (a lookup per inserted row at the end of the statement, about 6 % of the database's time per
-- firing) while guarding nothing Pulse needs: every statement that writes history inserts rows
-- only for job rows it has just updated in the same statement, which are locked. What the key
-- would also do, deleting a job's history with it, the triggers below do.
CREATE TABLE pgpulse_runs (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id         bigint NOT NULL,
    scheduled_for  timestamptz NOT NULL,
    attempts       integer NOT NULL DEFAULT 0,
    outcome        text NOT NULL CHECK (outcome IN ('running', 'retrying', 'succeeded', 'failed',
                                                    'skipped', 'fenced')),
    node_id        text,
    fencing_token  bigint,
    started_at     timestamptz,
    finished_at    timestamptz,
    error          text,
    output         text,
    occurrences        bigint NOT NULL DEFAULT 1,
    last_scheduled_for timestamptz,
    UNIQUE (job_id, scheduled_for),
    CONSTRAINT pgpulse_runs_occurrences
        CHECK (occurrences >= 1 AND (occurrences = 1) = (last_scheduled_for IS NULL)
               AND last_scheduled_for >= scheduled_for)
);
CREATE INDEX pgpulse_runs_recent ON pgpulse_runs (job_id, id DESC);
CREATE INDEX pgpulse_runs_finished ON pgpulse_runs (finished_at) WHERE finished_at IS NOT NULL;

-- Deleting jobs deletes their history, by any statement (Pulse's delete_job, a DELETE by hand),
-- once per statement. A delete that waited for a running step's lock sees the history that
-- step wrote: the trigger's DELETE takes a new snapshot (READ COMMITTED). TRUNCATE pgpulse_jobs
-- (which needs CASCADE, for pgpulse_job_names) truncates pgpulse_runs too.
CREATE FUNCTION pgpulse_runs_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgpulse_runs r USING removed d WHERE r.job_id = d.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER pgpulse_runs_delete AFTER DELETE ON pgpulse_jobs
REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION pgpulse_runs_delete();

CREATE FUNCTION pgpulse_runs_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE pgpulse_runs;
    RETURN NULL;
END
$$;
CREATE TRIGGER pgpulse_runs_truncate AFTER TRUNCATE ON pgpulse_jobs
FOR EACH STATEMENT EXECUTE FUNCTION pgpulse_runs_truncate();

-- pgpulse_runs, and the occurrences running now (one row each, outcome 'running'): a retry's
-- row written by an earlier attempt is shown as the running attempt while it runs. What
-- `pgpulse runs`, the API and the dashboard show.
CREATE VIEW pgpulse_runs_live AS
SELECT r.id, r.job_id, r.scheduled_for, r.attempts, r.outcome, r.node_id, r.fencing_token,
       r.started_at, r.finished_at, r.error, r.output, r.occurrences, r.last_scheduled_for
FROM pgpulse_runs r
WHERE NOT EXISTS (SELECT 1 FROM pgpulse_jobs j
                  WHERE j.id = r.job_id AND j.status = 'running'
                    AND j.scheduled_for = r.scheduled_for)
UNION ALL
SELECT j.run_id, j.id, j.scheduled_for, j.attempt, 'running', j.locked_by, j.fencing_token,
       j.claimed_at, NULL::timestamptz, NULL::text, NULL::text, 1::bigint, NULL::timestamptz
FROM pgpulse_jobs j
WHERE j.status = 'running';

CREATE TABLE pgpulse_nodes (
    node_id        text PRIMARY KEY,
    hostname       text NOT NULL,
    pid            integer NOT NULL,
    started_at     timestamptz NOT NULL DEFAULT now(),
    last_heartbeat timestamptz NOT NULL DEFAULT now(),
    state          text NOT NULL DEFAULT 'alive' CHECK (state IN ('alive', 'draining', 'stopped')),
    shards         smallint[] NOT NULL DEFAULT '{}',
    running        integer NOT NULL DEFAULT 0,
    slots          integer NOT NULL DEFAULT 0,
    handlers       text[] NOT NULL DEFAULT '{}',
    -- The node's time-to-live (about three heartbeats, from `node run --heartbeat`): its peers
    -- count it dead once its heartbeat is older, and its shards move. `pgpulse status` and the
    -- API judge each node by the ttl it registered with, so they call a node lost at the moment
    -- its peers stop counting it, and the shards of the live nodes add up.
    ttl            double precision CHECK (ttl > 0)
);

-- Bearer tokens of the HTTP API and dashboard (pgpulse.web). A token is shown once, when
-- created; only its SHA-256 is stored. Tokens are 256-bit random strings, so a fast hash is
-- enough (nothing to brute-force); the prefix lets people tell tokens apart in `pgpulse token
-- list` without storing the secret. A tenant token sees only its tenant; an admin token sees
-- every tenant. Revocation is a timestamp, checked on every request.
CREATE TABLE pgpulse_api_tokens (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    token_sha256  bytea NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    prefix        text NOT NULL,
    tenant        text,
    admin         boolean NOT NULL DEFAULT false,
    label         text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,
    revoked_at    timestamptz,
    CHECK (admin OR tenant IS NOT NULL)
);
