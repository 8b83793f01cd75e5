-- 017: a spot worker stays one across a server restart
-- (docs/scheduling.md#spot-workers).
--   workers.spot   1 when it registered with "labels": {"spot": true}; a
--                  worker does not register again after a restart, so the
--                  label lived in memory only (0: on demand, or a row from
--                  before 017)
-- A column added, no rebuild (as 008, 010 and 016).
ALTER TABLE workers ADD COLUMN spot INTEGER NOT NULL DEFAULT 0;
