-- The single-column checks of a job's definition move from pgpulse_jobs' CHECK constraints onto
-- the columns' types, to cut the database CPU per firing. PostgreSQL evaluates every CHECK of a
-- table on every UPDATE of it, and prepares each CHECK's expression once per statement and table:
-- the claim step (finish_and_claim) updates pgpulse_jobs twice per statement and paid for all of
-- them twice, though a firing never writes a definition column. A domain's check runs only where a
-- value is assigned to a column of that type: the job writes (upsert_job), never the hot path.
--
-- Only columns that no statement of the hot path assigns are moved (finish_and_claim and
-- finish_and_claim_occurrences, renew_leases, hand_back_runs, the heartbeat's sweeps): the
-- heartbeat's auto-resume writes resume_mode, so its CHECK stays on the table, with the status
-- checks (hot columns) and the cross-column ones (max_concurrency against overlap, the window).
--
-- One domain per meaning. The four count limits (max_attempts, max_runs, auto_pause_after,
-- backfill_limit) are one meaning, a positive count, and share pgpulse_positive_count.
-- A domain's violation names the domain and its constraint, not the column.
CREATE DOMAIN pgpulse_schedule_kind AS text
    CONSTRAINT pgpulse_schedule_kind_known CHECK (VALUE IN ('cron', 'interval', 'once'));
CREATE DOMAIN pgpulse_payload AS jsonb
    CONSTRAINT pgpulse_payload_is_object CHECK (jsonb_typeof(VALUE) = 'object');
CREATE DOMAIN pgpulse_catch_up AS text
    CONSTRAINT pgpulse_catch_up_known CHECK (VALUE IN ('skip', 'backfill', 'coalesce'));
CREATE DOMAIN pgpulse_overlap AS text
    CONSTRAINT pgpulse_overlap_known CHECK (VALUE IN ('forbid', 'replace', 'allow'));
CREATE DOMAIN pgpulse_positive_count AS integer
    CONSTRAINT pgpulse_positive_count_at_least_one CHECK (VALUE >= 1);
CREATE DOMAIN pgpulse_misfire_grace AS interval
    CONSTRAINT pgpulse_misfire_grace_at_least_1s CHECK (VALUE >= interval '1 second');
-- Seconds.
CREATE DOMAIN pgpulse_spread AS double precision
    CONSTRAINT pgpulse_spread_within_a_day CHECK (VALUE BETWEEN 0 AND 86400);

-- One ALTER TABLE, so the table is rewritten once (a domain with a check makes ALTER TYPE
-- rewrite: every row is checked and copied, re-packed at fillfactor 70, migration 0007) under an
-- ACCESS EXCLUSIVE lock: nodes wait for it meanwhile (no claim, renewal or job write lands).
-- Measured on PG15, 2 cores, bulk-loaded idle jobs, the whole migration's transaction: 0.6-0.9 s
-- for 100,000 jobs (47 MB with indexes), 10.5-11.9 s for 1,000,000 (463 MB): within the default
-- 30 s lease, but a run's renewals wait as long. The constraints are dropped before the types
-- change, so ALTER TYPE does not re-create them (max_concurrency's check, which reads overlap,
-- is re-created as it was, over overlap's base type). No view or index reads these columns.
ALTER TABLE pgpulse_jobs
    DROP CONSTRAINT pgpulse_jobs_schedule_kind_check,
    DROP CONSTRAINT pgpulse_jobs_payload_check,
    DROP CONSTRAINT pgpulse_jobs_catch_up_check,
    DROP CONSTRAINT pgpulse_jobs_backfill_limit_check,
    DROP CONSTRAINT pgpulse_jobs_misfire_grace_check,
    DROP CONSTRAINT pgpulse_jobs_max_attempts_check,
    DROP CONSTRAINT pgpulse_jobs_spread_check,
    DROP CONSTRAINT pgpulse_jobs_max_runs_check,
    DROP CONSTRAINT pgpulse_jobs_auto_pause_after_check,
    DROP CONSTRAINT pgpulse_jobs_overlap_check,
    ALTER COLUMN schedule_kind TYPE pgpulse_schedule_kind,
    ALTER COLUMN payload TYPE pgpulse_payload,
    ALTER COLUMN catch_up TYPE pgpulse_catch_up,
    ALTER COLUMN backfill_limit TYPE pgpulse_positive_count,
    ALTER COLUMN misfire_grace TYPE pgpulse_misfire_grace,
    ALTER COLUMN max_attempts TYPE pgpulse_positive_count,
    ALTER COLUMN spread TYPE pgpulse_spread,
    ALTER COLUMN max_runs TYPE pgpulse_positive_count,
    ALTER COLUMN auto_pause_after TYPE pgpulse_positive_count,
    ALTER COLUMN overlap TYPE pgpulse_overlap;
