-- Schedules and run control: one-off @at jobs, active windows and max_runs, spread,
-- exclusion calendars, pause with intent and auto-pause.

-- A job that will never have another occurrence (an @at job after its run, a window's or
-- max_runs' last) is 'completed': not idle forever, not failed. Its row and history stay.
ALTER TABLE pgpulse_jobs DROP CONSTRAINT pgpulse_jobs_status_check;
ALTER TABLE pgpulse_jobs ADD CONSTRAINT pgpulse_jobs_status_check
    CHECK (status IN ('idle', 'running', 'paused', 'failed', 'completed'));
ALTER TABLE pgpulse_jobs DROP CONSTRAINT pgpulse_jobs_schedule_kind_check;
ALTER TABLE pgpulse_jobs ADD CONSTRAINT pgpulse_jobs_schedule_kind_check
    CHECK (schedule_kind IN ('cron', 'interval', 'once'));

ALTER TABLE pgpulse_jobs
    -- seconds; each occurrence is claimable at scheduled_for + pgpulse_spread_offset(id, spread)
    ADD COLUMN spread double precision NOT NULL DEFAULT 0
        CHECK (spread >= 0 AND spread <= 86400),
    -- the active window: no occurrence before not_before or after not_after
    ADD COLUMN not_before timestamptz,
    ADD COLUMN not_after timestamptz,
    -- at most max_runs runs (an occurrence that ran: succeeded, failed or fenced), counted in
    -- runs_done; skipped occurrences do not count
    ADD COLUMN max_runs integer CHECK (max_runs >= 1),
    ADD COLUMN runs_done integer NOT NULL DEFAULT 0,
    -- names of the tenant's pgpulse_calendars whose dates exclude occurrences
    ADD COLUMN calendars text[] NOT NULL DEFAULT '{}',
    -- a pause with intent: until when (the leader resumes it then) and why
    ADD COLUMN paused_until timestamptz,
    ADD COLUMN pause_reason text,
    -- how the last resume treats the occurrences that fell inside the pause (those at or
    -- before resumed_at): 'skip' (recorded as skipped), 'once' (run once, as the newest of
    -- them), 'backfill' (each runs); NULL: the job's own catch_up
    ADD COLUMN resume_mode text CHECK (resume_mode IN ('skip', 'once', 'backfill')),
    ADD COLUMN resumed_at timestamptz,
    -- pause the job after this many consecutive failed runs (NULL: never); the count so far
    ADD COLUMN auto_pause_after integer CHECK (auto_pause_after >= 1),
    ADD COLUMN failures integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT pgpulse_jobs_window_check CHECK (not_after >= not_before);

-- A job's stable spread offset in [0, spread) seconds, to the microsecond: the same formula as
-- pgpulse.spread.spread_offset (tests/test_run_control.py checks they agree), so the database
-- can place next_run_at without a round trip. h is the first 8 bytes of
-- SHA-256('pgpulse-spread:' || id) as an unsigned 64-bit number, and the offset
-- floor(h * spread_us / 2^64) microseconds. SQL rather than PL/pgSQL: it is one expression.
CREATE FUNCTION pgpulse_spread_offset(job_id bigint, spread double precision)
RETURNS interval
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
SELECT CASE WHEN spread = 0 THEN interval '0'
            ELSE floor((h::numeric + CASE WHEN h < 0 THEN 18446744073709551616 ELSE 0 END)
                       * round(spread * 1000000)::numeric / 18446744073709551616)::float8
                 * interval '1 microsecond' END
FROM (SELECT ('x' || encode(substring(sha256(convert_to('pgpulse-spread:' || job_id::text,
                                                        'UTF8')) FROM 1 FOR 8), 'hex'))
             ::bit(64)::bigint AS h) AS hashed
$$;

-- The leader's resume of pauses that end: paused rows by paused_until (few; a partial index).
CREATE INDEX pgpulse_jobs_pause_ends ON pgpulse_jobs (paused_until)
    WHERE status = 'paused' AND paused_until IS NOT NULL;

-- Named exclusion calendars of a tenant (pgpulse.calendars.ExclusionCalendar): explicit dates,
-- a country's (and subdivision's) public holidays, or both. Jobs name them in
-- pgpulse_jobs.calendars; a calendar in use is not deleted (the store refuses).
CREATE TABLE pgpulse_calendars (
    tenant      text NOT NULL,
    name        text NOT NULL,
    dates       date[] NOT NULL DEFAULT '{}',
    country     text,
    subdivision text CHECK (subdivision IS NULL OR country IS NOT NULL),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, name),
    CHECK (cardinality(dates) > 0 OR country IS NOT NULL)
);
