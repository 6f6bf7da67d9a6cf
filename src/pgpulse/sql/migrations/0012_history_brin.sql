-- The history's pruning index as BRIN, and a B-tree only over the runs the alerts read by
-- finished_at. Every firing inserts its run row, and every B-tree of pgpulse_runs gets an entry
-- for it; the finished_at one served two readers only: housekeeping's prune (finished_at older
-- than the retention) and the alerts' scan of recent failed and skipped runs. A run's row is
-- written when it ends, finished_at = now(), so finished_at follows the table's physical order
-- and a BRIN index (one summary per 128 pages) serves the prune; the alerts' rows, failed or
-- skipped (a firing that succeeds is neither), get a partial B-tree of their own. A succeeded
-- firing now adds three B-tree entries to the history instead of four.
DROP INDEX pgpulse_runs_finished;
CREATE INDEX pgpulse_runs_finished ON pgpulse_runs USING brin (finished_at);
CREATE INDEX pgpulse_runs_unhappy ON pgpulse_runs (finished_at)
    WHERE outcome IN ('failed', 'skipped');
