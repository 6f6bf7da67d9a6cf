-- Interruptions are counted apart from failures, so a deploy never uses up a run's attempts: an
-- attempt that ended without an outcome because its node stopped (handed back at a drain) or died
-- with it (its lease reaped by the sweeper) is no failure of the handler. max_attempts bounds the
-- handler's failures (attempt - 1 - interruptions before a claim); the interruptions of one run
-- have their own bound (pgpulse.planner.MAX_INTERRUPTIONS), so a job that kills its node still
-- stops. `attempt` stays the attempt's number in the run's history, every interrupted one included.
-- Reset with attempt wherever a job row moves to another occurrence; an extra occurrence's
-- count lives and dies with its row. A constant default: no table rewrite.
ALTER TABLE pgpulse_jobs ADD COLUMN interruptions integer NOT NULL DEFAULT 0;
ALTER TABLE pgpulse_occurrences ADD COLUMN interruptions integer NOT NULL DEFAULT 0;
