-- 009: a decision due at the end of a trial's lease survives a restart.
-- A pause or a PBT exploit is answered "stop" at once, but it is
-- carried out only when the trial's lease ends (its complete, release, fail
-- or expiry). Until 009 that pending action lived only in memory: a restart
-- in between made the lease's complete end the trial TERMINATED, although an
-- exploit had already replaced its config and checkpoint (or a pause should
-- have left it PAUSED). It is now written in the decision's transaction and
-- cleared in the write that carries it out.
--   lease_end_action: 'pause' | 'exploit' | 'stop' (a pause-pending trial a
--     later decision ended); NULL: nothing due.
--   checkpoint_time_total_s: the time_total_s at the trial's checkpoint when
--     the checkpoint is a copy of a PBT donor's (copied with it at exploit
--     time: the trial's own results do not know it); NULL: the checkpoint is
--     the trial's own (the lease looks its time_total_s up in its results).
-- Columns added, no rebuild (as 008).
ALTER TABLE trials ADD COLUMN lease_end_action TEXT;
ALTER TABLE trials ADD COLUMN checkpoint_time_total_s REAL;
