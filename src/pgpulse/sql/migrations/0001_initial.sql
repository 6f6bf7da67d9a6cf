-- Pulse schema, version 1.
-- scheduled_jobs is the single source of truth: one row per job, holding the definition and the
-- state of its current occurrence. job_runs keeps one row per occurrence (job_id, scheduled_for).
-- pgpulse_nodes is the registry of scheduler nodes and their heartbeats.

CREATE TABLE scheduled_jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant           text NOT NULL,
    name             text NOT NULL,
    -- definition
    schedule         text NOT NULL,
    schedule_kind    text NOT NULL CHECK (schedule_kind IN ('cron', 'interval')),
    timezone         text NOT NULL DEFAULT 'UTC',
    handler          text NOT NULL,
    payload          jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(payload) = 'object'),
    catch_up         text NOT NULL DEFAULT 'skip' CHECK (catch_up IN ('skip', 'backfill', 'coalesce')),
    backfill_limit   integer CHECK (backfill_limit > 0),
    misfire_grace    interval NOT NULL DEFAULT '60 seconds',
    max_attempts     integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    retry_backoff    interval NOT NULL DEFAULT '1 second',
    timeout          interval,
    source           text NOT NULL DEFAULT 'api',
    meta             jsonb NOT NULL DEFAULT '{}'::jsonb,
    -- the 64 shards are fixed by this column; stable_hash(id) = id for an identity column
    shard_id         smallint GENERATED ALWAYS AS ((id % 64)::smallint) STORED,
    -- state of the current occurrence
    status           text NOT NULL DEFAULT 'idle' CHECK (status IN ('idle', 'running', 'paused', 'failed')),
    anchor_at        timestamptz NOT NULL,          -- interval schedules count from here
    scheduled_for    timestamptz NOT NULL,          -- the current occurrence (logical time)
    next_run_at      timestamptz NOT NULL,          -- when it may be claimed (later than scheduled_for on retry)
    attempt          integer NOT NULL DEFAULT 0,    -- attempts made for scheduled_for
    fencing_token    bigint NOT NULL DEFAULT 0,     -- grows on every claim
    locked_by        text,
    lease_expires_at timestamptz,
    last_error       text,
    last_outcome     text,
    last_finished_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant, name),
    CHECK ((status = 'running') = (lease_expires_at IS NOT NULL))
);

-- The hot poll path: only idle rows, ordered by due time. The shard filter is read from the
-- index too, so a claim stops after LIMIT matching entries however large the backlog is.
CREATE INDEX scheduled_jobs_due ON scheduled_jobs (next_run_at, shard_id) WHERE status = 'idle';
-- The sweeper's path: running rows by lease expiry.
CREATE INDEX scheduled_jobs_leases ON scheduled_jobs (lease_expires_at) WHERE status = 'running';

CREATE TABLE job_runs (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id         bigint NOT NULL REFERENCES scheduled_jobs (id) ON DELETE CASCADE,
    scheduled_for  timestamptz NOT NULL,
    attempts       integer NOT NULL DEFAULT 0,
    outcome        text NOT NULL CHECK (outcome IN ('running', 'retrying', 'succeeded', 'failed', 'skipped', 'fenced')),
    node_id        text,
    fencing_token  bigint,
    started_at     timestamptz,
    finished_at    timestamptz,
    error          text,
    output         text,
    UNIQUE (job_id, scheduled_for)
);
CREATE INDEX job_runs_recent ON job_runs (job_id, id DESC);
CREATE INDEX job_runs_finished ON job_runs (finished_at) WHERE finished_at IS NOT NULL;

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
    handlers       text[] NOT NULL DEFAULT '{}'
);
