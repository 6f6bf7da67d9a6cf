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

-- fragment: key_open
-- Whether candidate job j (a claim's scan) may run as far as its concurrency key goes, as the
-- statement's snapshot sees it: no key, or no limit on it, or fewer leases than the limit
-- (pgpulse_key_full; a job without a key calls nothing). A
-- filter only, so that a key at its limit does not fill the scan's LIMIT with rows that cannot
-- run; {key_room} is what makes the bound exact.
(j.concurrency_key IS NULL OR NOT pgpulse_key_full(j.tenant, j.concurrency_key))

-- fragment: key_room
-- The room left under each limit of a key among the candidates (CTE cand: tenant,
-- concurrency_key), exactly, across every node (docs/policies.md, "Concurrency keys"): the limit
-- row is locked SKIP LOCKED (a key another claimer holds waits for the next step), and its
-- newest version (the one a lock returns under READ COMMITTED, its condition rechecked) must be
-- the version this statement's snapshot reads: every claim of a key bumps its row's claims, so
-- an equal version means every claim of the key committed so far is in the snapshot, and the
-- count of leases (pgpulse_key_running) misses none. key_seen: the limits as the snapshot reads
-- them (a key without a limit row is not limited). Each key is looked up by its primary key
-- (LATERAL): nothing reads the limits of other keys, and candidates without a key read none.
key_seen AS (
    SELECT l.*
    FROM (SELECT DISTINCT c.tenant, c.concurrency_key FROM cand c
          WHERE c.concurrency_key IS NOT NULL) AS d
    CROSS JOIN LATERAL (SELECT l.tenant, l.key, l.claims FROM pgpulse_limits l
                        WHERE l.tenant = d.tenant AND l.key = d.concurrency_key) AS l
), key_room AS (
    SELECT l.tenant, l.key, l.max_running - pgpulse_key_running(l.tenant, l.key) AS free
    FROM key_seen s
    CROSS JOIN LATERAL (SELECT l.* FROM pgpulse_limits l
                        WHERE l.tenant = s.tenant AND l.key = s.key AND l.claims = s.claims
                        FOR UPDATE OF l SKIP LOCKED) AS l
)

-- fragment: key_allows
-- Whether candidate c fits its key's room: no key, no limit on it, or fewer candidates of its
-- key ahead of it in claim order (rank, then due) than the room key_room found (none: a key
-- another claimer holds). Evaluated for keyed candidates only.
(c.concurrency_key IS NULL
 OR NOT EXISTS (SELECT 1 FROM key_seen s
                WHERE s.tenant = c.tenant AND s.key = c.concurrency_key)
 OR (SELECT count(*) FROM cand a
     WHERE a.tenant = c.tenant AND a.concurrency_key = c.concurrency_key
       AND (-a.rank, a.next_run_at, a.id) < (-c.rank, c.next_run_at, c.id))
    < (SELECT k.free FROM key_room k WHERE k.tenant = c.tenant AND k.key = c.concurrency_key))

-- fragment: key_bump
-- Every claim of a keyed job bumps its limit row's version (key_room), for the keys of the
-- claimed rows (CTE picked: tenant, concurrency_key) that key_room locked.
key_bumped AS (
    UPDATE pgpulse_limits AS l
    SET claims = l.claims + 1
    WHERE (l.tenant, l.key) IN (SELECT k.tenant, k.key FROM key_room k
                                JOIN picked p ON (p.tenant, p.concurrency_key) = (k.tenant, k.key))
)

-- fragment: job_open
-- Whether idle job j may be claimed now as far as its limits go (pgpulse_job_open: under overlap
-- allow, fewer forked occurrences than max_concurrency; its concurrency key not at its limit). A
-- job with neither calls nothing.
((j.max_concurrency IS NULL AND j.concurrency_key IS NULL)
 OR pgpulse_job_open(j.id, j.max_concurrency, j.tenant, j.concurrency_key))

-- fragment: delete_doomed_runs
-- The end of a prune of runs (prune_runs, prune_job_runs): delete the runs of CTE doomed (id,
-- scheduled_for: the partitioned history's key, so each is found in its day's partition) and
-- say how many went.
gone AS (
    DELETE FROM pgpulse_runs r
    USING doomed d
    WHERE r.id = d.id AND r.scheduled_for = d.scheduled_for
    RETURNING 1
)
SELECT count(*) AS runs FROM gone
