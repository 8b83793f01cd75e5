-- 003: the global change counter (updated_seq, ?since=) is saved with every
-- commit, so it never goes backwards across a restart even when the largest
-- number went to a change that left no row of its own (a checkpoint upload).
CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value INTEGER NOT NULL
);
INSERT INTO meta (key, value) VALUES ('seq',
  max(COALESCE((SELECT max(updated_seq) FROM experiments), 0),
      COALESCE((SELECT max(updated_seq) FROM trials), 0),
      COALESCE((SELECT max(seq) FROM results), 0)));
