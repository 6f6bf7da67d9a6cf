-- Pause a running job after its run: `job pause` on a running job sets
-- pause_requested (with paused_until and pause_reason, as a pause of an idle job does), and the
-- node's write of the run's end makes the job paused instead of idle (finish_and_claim,
-- fork_occurrence); a retry of the run still happens, as it is part of the run. While the flag
-- is set, no pending extra occurrence of the job starts (finish_and_claim_occurrences). Every
-- statement that pauses a job, resumes it or ends its run clears it.
-- A constant default: no table rewrite.
ALTER TABLE pgpulse_jobs ADD COLUMN pause_requested boolean NOT NULL DEFAULT false;
