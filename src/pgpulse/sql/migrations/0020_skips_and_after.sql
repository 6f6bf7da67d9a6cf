-- Skipped occurrences and @after schedules.

-- Skipping chosen occurrences of a job without pausing it (`pgpulse job skip`): the job row
-- holds the occurrences to skip, each with who asked and why, as a small JSON array ordered by
-- instant (at most core.skips.MAX_SKIPS; NULL: none, as almost every job). The claim returns
-- it, and the node records a skipped run for a listed occurrence instead of running it. On the
-- job row, not a table of its own: the claim reads it with the row it already locks, so a job
-- without skips pays one NULL column.
-- A column without a default: no table rewrite.
ALTER TABLE pgpulse_jobs ADD COLUMN skips jsonb;

ALTER TABLE pgpulse_job_history DROP CONSTRAINT pgpulse_job_history_action_check;
ALTER TABLE pgpulse_job_history
    ADD CONSTRAINT pgpulse_job_history_action_check
        CHECK (action IN ('create', 'update', 'pause', 'resume', 'trigger', 'backfill',
                          'delete', 'skip', 'unskip')) NOT VALID;
ALTER TABLE pgpulse_job_history VALIDATE CONSTRAINT pgpulse_job_history_action_check;

-- `@after 10m` schedules (a fixed delay after each run's end) are a fourth kind.
ALTER DOMAIN pgpulse_schedule_kind DROP CONSTRAINT pgpulse_schedule_kind_known;
ALTER DOMAIN pgpulse_schedule_kind
    ADD CONSTRAINT pgpulse_schedule_kind_known
        CHECK (VALUE IN ('cron', 'interval', 'once', 'delay'));
