-- A backfill request reads what earlier backfills of the range did (occurrences.sql,
-- backfill_history): an occurrence a backfill already ran is not "missing" any more, so a
-- repeated request adds nothing. Those rows are kind 'backfill', outside pgpulse_runs_occurrence
-- (kind 'scheduled'); this partial index finds them by (job, instant) without reading the job's
-- whole history. It holds only backfill rows, built once under the migration's lock.
CREATE INDEX pgpulse_runs_backfill ON pgpulse_runs (job_id, scheduled_for)
    WHERE kind = 'backfill';
