-- Pulse schema, version 3: interval schedules keep their anchor to the microsecond.
-- Up to version 2 an `@every` job fired on its anchor truncated to whole seconds, while anchor_at
-- held the creation instant with its microseconds. From now on occurrences are exactly
-- anchor_at + k * interval, so existing interval jobs get the whole-second anchor they have been
-- firing on: their grid, and the occurrence they hold, do not move. New or changed jobs get the
-- exact instant of their creation.
UPDATE scheduled_jobs
SET anchor_at = date_trunc('second', anchor_at)
WHERE schedule_kind = 'interval' AND anchor_at <> date_trunc('second', anchor_at);
