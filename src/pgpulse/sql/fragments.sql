-- Expressions that several statements share, each written once here and placed where a
-- statement names it by its marker ({epoch}, {run_page_columns}, ...); sql/__init__.py fills
-- the markers when it loads the statements, so what is prepared is the whole statement. One
-- more, {definition_columns} (a job's definition as the writes read it), is written there from
-- the job definition model.

-- fragment: epoch
-- The database timeline's epoch, (timeline - 1) * 2^48 (invariant 9): a run id is the
-- sequence's value + the epoch and a fencing token greatest(token, epoch) + 1, so nothing
-- handed out before a failover that lost WAL is handed out again on the new timeline.
((('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint - 1) << 48)

-- fragment: attempt_written_over
-- How an attempt is written into its occurrence's run row (alias r) that holds an earlier
-- one, after ON CONFLICT ... DO UPDATE: a later attempt moves the earlier (if it had started)
-- into earlier_attempts and takes the row; the same attempt written again (a pending
-- occurrence's last attempt, now cancelled) ends it and keeps its output and attempt end.
SET earlier_attempts = CASE WHEN excluded.attempts > r.attempts AND r.started_at IS NOT NULL
                       THEN coalesce(r.earlier_attempts, '[]'::jsonb) || jsonb_build_array(
                           jsonb_build_object(
                               'attempt', r.attempts, 'node_id', r.node_id,
                               'fencing_token', r.fencing_token, 'started_at', r.started_at,
                               'ended_at', coalesce(r.finished_at, r.attempt_ended_at),
                               'outcome', r.outcome, 'error', r.error, 'output', r.output))
                       ELSE r.earlier_attempts END,
    attempts = excluded.attempts, outcome = excluded.outcome, node_id = excluded.node_id,
    fencing_token = excluded.fencing_token, started_at = excluded.started_at,
    finished_at = excluded.finished_at, error = excluded.error,
    occurrences = excluded.occurrences, last_scheduled_for = excluded.last_scheduled_for,
    output = CASE WHEN excluded.attempts > r.attempts THEN excluded.output
                  ELSE coalesce(excluded.output, r.output) END,
    attempt_ended_at = CASE WHEN excluded.attempts > r.attempts THEN excluded.attempt_ended_at
                            ELSE coalesce(excluded.attempt_ended_at, r.attempt_ended_at) END

-- fragment: run_page_columns
-- A page of runs' columns (web.sql: runs_recorded, runs_running) over its subquery p: the
-- run's own, and what is derived from them. lag: the first attempt's start - scheduled_for -
-- the spread offset of a scheduled occurrence (none for a backfill's run); duration: the latest
-- attempt's; the definition's revision when the run started.
p.*,
coalesce(p.last_scheduled_for, p.scheduled_for) AS last_scheduled_for,
extract(epoch FROM p.finished_at - p.started_at)::float8 AS duration,
CASE WHEN p.kind NOT IN ('backfill', 'after')
     THEN extract(epoch FROM p.first_started_at - p.scheduled_for
                             - CASE WHEN p.kind = 'scheduled'
                                    THEN pgpulse_spread_offset(p.job_id, p.spread)
                                    ELSE interval '0' END)::float8 END AS lag,
coalesce(p.earlier_attempts, '[]'::jsonb) AS earlier_attempts,
coalesce((SELECT h.revision FROM pgpulse_job_history h
          WHERE h.job_id = p.job_id
            AND h.at <= coalesce(p.started_at, p.finished_at, p.scheduled_for)
          ORDER BY h.id DESC
          LIMIT 1), 1) AS revision
