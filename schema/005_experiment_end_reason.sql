-- 005: why an experiment ended other than by running every trial:
-- "fail_fast: trial ID (NAME) failed: REASON" or "cancelled by user"; NULL
-- otherwise. Written in the same transaction as the change that ended it.
ALTER TABLE experiments ADD COLUMN end_reason TEXT;
