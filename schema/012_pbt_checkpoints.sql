-- PBT: the checkpoint a top trial uploaded for the result PBT ranked it at
-- (docs/scheduling.md#pbt). A bottom trial that exploits it later gets this
-- one, as Ray clones the checkpoint it saved at that result, although the
-- donor has uploaded newer ones since into checkpoints. One per trial,
-- replaced at its next ranking in the top quantile; deleted with its
-- experiment.
CREATE TABLE pbt_checkpoints (
  trial_id  INTEGER PRIMARY KEY REFERENCES trials(id),
  iteration INTEGER NOT NULL,
  crc32     INTEGER NOT NULL,
  data      BLOB NOT NULL
);
