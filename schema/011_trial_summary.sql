-- 011: bounded memory (ARCHITECTURE.md#bounded-memory). An ended
-- trial is kept in memory as a summary, not its whole history: the summary
-- is written with the trial row, so a restart need not read its results.
--   created_seq   the change counter when the trial was made: every result
--                 of it has a larger seq (0: unknown, rows from before 011)
--   res_known     1: nres .. score_max were exact when the row was written;
--                 0: an older row (or the bulk path), computed at next start
--   nres, first_seq, last_seq   its results' count and seq range (0: none)
--   last_t        the last result's time value (NULL: none)
--   score_*       the experiment metric's best.c scopes over its values in
--                 report order (null counts as NaN): last, avg, last-5-avg,
--                 last-10-avg (NULL when none or a non-finite value is in
--                 the window), min and max of the finite values (NULL: none)
-- Columns added, no rebuild (as 008 and 010).
ALTER TABLE trials ADD COLUMN created_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN res_known INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN nres INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN first_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN last_t REAL;
ALTER TABLE trials ADD COLUMN score_last REAL;
ALTER TABLE trials ADD COLUMN score_avg REAL;
ALTER TABLE trials ADD COLUMN score_last5 REAL;
ALTER TABLE trials ADD COLUMN score_last10 REAL;
ALTER TABLE trials ADD COLUMN score_min REAL;
ALTER TABLE trials ADD COLUMN score_max REAL;
