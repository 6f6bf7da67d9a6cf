-- Expressions that several statements share, each written once here and placed where a
-- statement names it by its marker ({epoch}, {attempt_written_over}); sql/__init__.py fills the
-- markers when it loads the statements, so what is prepared is the whole statement.

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
