-- 008: PBT generations. An exploit sends a trial back to its
-- donor's checkpoint, which may be older than the trial's own progress: the
-- trial then reports time values it already reported. A trial's generation
-- (0 at creation, +1 when an exploited trial's lease ends and it resumes
-- from the donor's checkpoint) tells those apart: each result keeps the
-- generation it was reported in, and a repeated time value is a replay only
-- within the trial's current generation.
--
-- No table rebuild and no (trial_id, gen, t) index: since 002 the results
-- table is append-only on purpose (the idempotency index lives in memory,
-- rebuilt at load from these columns), so the columns are simply added and
-- the existing rows (every one of generation 0) keep their seq and indexes.
ALTER TABLE results ADD COLUMN gen INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
