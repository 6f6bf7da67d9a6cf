-- Every attempt of a run, not only its latest, so the run page can show each one.
--
-- A run row holds its latest attempt in its own columns (node_id, fencing_token, started_at,
-- finished_at, error, outcome). Each write that ends a later attempt over the same row (a retry,
-- a take-over after a lost lease, a hand-back) first appends the attempt it replaces to
-- earlier_attempts, a JSON array in attempt order: {attempt, node_id, fencing_token,
-- started_at, ended_at, outcome, error, output} (output at most MAX_OUTPUT_CHARS, 16 KiB, per
-- attempt). A run that succeeds at its first attempt (nearly every run) is one INSERT, as
-- before, with earlier_attempts NULL: nothing is added to the hot path. A JSON array rather
-- than a table of attempts: a second table would cost every firing a second insert (and its
-- index), where this costs only the rare retry.
--
-- attempt_ended_at: when the latest attempt ended while the run goes on (outcome 'retrying';
-- finished_at stays NULL until the run ends, as pruning and the finished index expect). For a
-- lease that expired it is the instant the sweeper reaped it (the attempt ended no later).
ALTER TABLE pgpulse_runs
    ADD COLUMN earlier_attempts jsonb,
    ADD COLUMN attempt_ended_at timestamptz;

-- The live view gains the two columns, and first_started_at: when the run's first attempt
-- started (the lag people mean: a retried run that started on time is not late). For the attempt
-- running now, the earlier attempts are those of the run's row (written when they ended) plus
-- that row's own latest attempt.
CREATE OR REPLACE VIEW pgpulse_runs_live AS
SELECT r.id, r.job_id, r.scheduled_for, r.attempts, r.outcome, r.node_id, r.fencing_token,
       r.started_at, r.finished_at, r.error, r.output, r.occurrences, r.last_scheduled_for,
       r.earlier_attempts, r.attempt_ended_at,
       coalesce((r.earlier_attempts -> 0 ->> 'started_at')::timestamptz, r.started_at)
           AS first_started_at
FROM pgpulse_runs r
WHERE NOT EXISTS (SELECT 1 FROM pgpulse_jobs j
                  WHERE j.id = r.job_id AND j.status = 'running'
                    AND j.scheduled_for = r.scheduled_for)
UNION ALL
SELECT j.run_id, j.id, j.scheduled_for, j.attempt, 'running', j.locked_by, j.fencing_token,
       j.claimed_at, NULL::timestamptz, NULL::text, NULL::text, 1::bigint, NULL::timestamptz,
       prior.attempts, NULL::timestamptz,
       coalesce((prior.attempts -> 0 ->> 'started_at')::timestamptz, j.claimed_at)
FROM pgpulse_jobs j
LEFT JOIN LATERAL (
    SELECT coalesce(p.earlier_attempts, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
               'attempt', p.attempts, 'node_id', p.node_id, 'fencing_token', p.fencing_token,
               'started_at', p.started_at, 'ended_at', p.attempt_ended_at,
               'outcome', p.outcome, 'error', p.error, 'output', p.output)) AS attempts
    FROM pgpulse_runs p
    WHERE p.job_id = j.id
      AND p.scheduled_for = j.scheduled_for
      AND p.started_at IS NOT NULL
) prior ON true
WHERE j.status = 'running';
