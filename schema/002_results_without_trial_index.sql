-- 002: results lose their (trial_id, t) index. Reporting trials interleave,
-- so that index took a random leaf page per result: every commit dirtied
-- pages all over it and every WAL checkpoint had to copy most of it back,
-- which stalled replies. The server already keeps each trial's time values
-- (idempotency) and result seqs in memory, and reads a trial's results by
-- seq (the rowid), so the table is now append-only: one tail page per commit.
CREATE TABLE results_v2 (
  seq           INTEGER PRIMARY KEY,
  trial_id      INTEGER NOT NULL REFERENCES trials(id),
  experiment_id INTEGER NOT NULL,
  t             REAL NOT NULL,
  decision      TEXT NOT NULL,          -- continue | stop
  data          TEXT NOT NULL           -- the flat object as posted
);
INSERT INTO results_v2 (seq, trial_id, experiment_id, t, decision, data)
  SELECT seq, trial_id, experiment_id, t, decision, data FROM results;
DROP TABLE results;
ALTER TABLE results_v2 RENAME TO results;
CREATE INDEX results_by_experiment ON results(experiment_id, seq);
