-- Pulse schema: where each job's definition comes from, its revision, and an audit trail.
--
-- pgpulse_jobs.source already names the origin of a definition; from now on it is one of
-- `cli`, `api`, `code:<app>`, `crontab:<path>` or `apply:<name>`, the unit that `pgpulse
-- apply --prune`, `crontab import --sync` and `App(prune=True)` reconcile. Crontab jobs were
-- stored as `crontab:<path>:<line>`; the line number goes, so that the jobs of one file are one
-- source (a moved line no longer changes its job's source). Plain `code` becomes `code:default`
-- (the name an App has unless given one).
UPDATE pgpulse_jobs SET source = regexp_replace(source, ':[0-9]+$', '')
WHERE source LIKE 'crontab:%:%';
UPDATE pgpulse_jobs SET source = 'code:default' WHERE source = 'code';

-- The definition's revision: 1 when created, one more at each change of a definition field.
-- A constant default: no rewrite of the table.
ALTER TABLE pgpulse_jobs ADD COLUMN revision integer NOT NULL DEFAULT 1;

-- No index on source: a firing updates its job row twice, neither update HOT, and each would
-- pay an entry in it (see pgpulse_job_names in 0001). Reading a source's jobs (apply, crontab
-- sync, a node's start, status) scans pgpulse_jobs: rare statements, not the firing path.

-- The audit trail: one row per create, update, pause, resume, trigger and delete of a job,
-- written in the transaction that makes the change. `at` is the database's clock; `source` is
-- the path the change came through (the definition's source for writes of definitions, `cli`
-- or `api` for state changes); `actor` who made it (`os:<user>` for the command line,
-- `token:<id>` (and its label) for the API, `code:<app>@<node>` for a node); `changes` the
-- fields that changed, {"field": [old, new]} (every field of a created job, with old null);
-- `revision` the job's revision after the change. job_id has no foreign key: the trail of a
-- deleted job is kept (its delete is part of it) until it is pruned with the runs' retention.
CREATE TABLE pgpulse_job_history (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id    bigint NOT NULL,
    tenant    text NOT NULL,
    name      text NOT NULL,
    at        timestamptz NOT NULL DEFAULT now(),
    action    text NOT NULL
              CHECK (action IN ('create', 'update', 'pause', 'resume', 'trigger', 'delete')),
    source    text NOT NULL,
    actor     text NOT NULL,
    revision  integer NOT NULL,
    changes   jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(changes) = 'object')
);
CREATE INDEX pgpulse_job_history_job ON pgpulse_job_history (job_id, id DESC);
CREATE INDEX pgpulse_job_history_name ON pgpulse_job_history (tenant, name, id DESC);
CREATE INDEX pgpulse_job_history_at ON pgpulse_job_history (at);

-- What each app's code declared the last time one of its nodes started: the jobs of source
-- `code:<app>` that are not in `names` (of `tenant`) are "declared by code no longer running" (status, job
-- show), and `App(prune=True)` deletes them.
CREATE TABLE pgpulse_code_declarations (
    source      text PRIMARY KEY CHECK (source LIKE 'code:%'),
    tenant      text NOT NULL,
    names       text[] NOT NULL,
    node_id     text NOT NULL,
    declared_at timestamptz NOT NULL DEFAULT now()
);
