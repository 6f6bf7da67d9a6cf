-- Alerts (docs/alerts.md): notifiers configured once, rules per job (or cluster-wide defaults)
-- that name them, alert events with a unique key, their deliveries claimed like jobs, silences.
-- Five new tables; nothing existing changes, so the migration is instant on any database.
-- job_id columns have no foreign key to pgpulse_jobs: a key would add its checks to every update
-- of a job row (two per firing); a rule or silence of a deleted job matches no job (ids are never
-- reused) and Store.delete_job removes them.

-- A notifier: where alerts go. config holds the kind's validated JSON (pgpulse.notify), secrets
-- included: it is never returned by the CLI or the API, which show notify's redacted form.
CREATE TABLE pgpulse_notifiers (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    kind       text NOT NULL CHECK (kind IN ('webhook', 'email', 'checkin')),
    config     jsonb NOT NULL CHECK (jsonb_typeof(config) = 'object'),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- A rule: job_id's (NULL: the cluster-wide default of every job, or a cluster rule) rule with its
-- threshold (failures: a count; late, missed, silence, lag, no_live_node: seconds), sent to
-- notifiers (ids of pgpulse_notifiers; a notifier named by a rule cannot be removed). A job's own
-- rule of a kind replaces the default of that kind.
CREATE TABLE pgpulse_alert_rules (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     bigint,
    rule       text NOT NULL CHECK (rule IN ('failures', 'late', 'skipped', 'missed', 'silence',
                                             'recovered', 'node_died', 'leader_changed', 'lag')),
    threshold  double precision CHECK (threshold > 0),
    notifiers  bigint[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX pgpulse_alert_rules_key ON pgpulse_alert_rules (coalesce(job_id, 0), rule);

-- One row per alert event. dedupe_key names what fired — job, rule, and the occurrence or window
-- (e.g. 'job/42/failures/2026-03-10T02:30:00Z') — so several nodes evaluating the same rule at
-- once produce one event (INSERT ... ON CONFLICT DO NOTHING). An open event (resolved_at NULL)
-- closes when its job succeeds again (rule 'recovered'); silenced: fired inside a silence,
-- recorded but not delivered.
CREATE TABLE pgpulse_alert_events (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dedupe_key      text NOT NULL UNIQUE,
    job_id          bigint,
    rule            text NOT NULL,
    scheduled_for   timestamptz,
    run_id          bigint,
    fired_at        timestamptz NOT NULL DEFAULT now(),
    error           text,
    details         jsonb NOT NULL DEFAULT '{}'::jsonb,
    notifiers       bigint[] NOT NULL DEFAULT '{}',
    silenced        boolean NOT NULL DEFAULT false,
    resolved_at     timestamptz,
    acknowledged_at timestamptz,
    acknowledged_by text
);
CREATE INDEX pgpulse_alert_events_open ON pgpulse_alert_events (job_id) WHERE resolved_at IS NULL;
CREATE INDEX pgpulse_alert_events_recent ON pgpulse_alert_events (id DESC);

-- One delivery per (event, notifier), claimed like a job: a lease, a fencing token that grows on
-- every claim, attempts counted; every outcome write names the token, so a node that lost its
-- lease (killed mid-delivery, paused) cannot overwrite what the node that took over recorded.
CREATE TABLE pgpulse_alert_deliveries (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id         bigint NOT NULL REFERENCES pgpulse_alert_events (id) ON DELETE CASCADE,
    notifier_id      bigint NOT NULL REFERENCES pgpulse_notifiers (id) ON DELETE CASCADE,
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    locked_by        text,
    lease_expires_at timestamptz,
    fencing_token    bigint NOT NULL DEFAULT 0,
    last_status      integer,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    UNIQUE (event_id, notifier_id)
);
CREATE INDEX pgpulse_alert_deliveries_due ON pgpulse_alert_deliveries (next_attempt_at)
    WHERE status = 'pending';

-- A silence: alerts of job_id (NULL: every job and the cluster) fired before ends_at are recorded
-- but not delivered.
CREATE TABLE pgpulse_alert_silences (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     bigint,
    starts_at  timestamptz NOT NULL DEFAULT now(),
    ends_at    timestamptz NOT NULL,
    reason     text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK (ends_at > starts_at)
);
CREATE INDEX pgpulse_alert_silences_ends ON pgpulse_alert_silences (ends_at);
