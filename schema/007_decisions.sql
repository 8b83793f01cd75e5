-- 007: visible decisions and the time budget. Every write below
-- is made in the same transaction as the decision it records.
-- The trial's last decision sentence ("stopped at t=4: 0.41 worse than
-- cutoff 0.39 of 9 trials at rung 4", "stop rule: accuracy 0.951 >= 0.95").
ALTER TABLE trials ADD COLUMN reason TEXT;
-- Seconds the experiment ran while a server ran (time_budget_s counts these).
ALTER TABLE experiments ADD COLUMN run_time_s REAL NOT NULL DEFAULT 0;
-- Every decision with a reason, in order. kind: stopped, paused, resumed,
-- promoted, exploited, stop_rule, time_budget; data: JSON or NULL (exploited:
-- {"donor", "t", "old_config", "new_config"}).
CREATE TABLE trial_events (
  seq           INTEGER PRIMARY KEY,
  trial_id      INTEGER NOT NULL,
  experiment_id INTEGER NOT NULL,
  time          REAL NOT NULL,
  kind          TEXT NOT NULL,
  reason        TEXT NOT NULL,
  data          TEXT
);
CREATE INDEX trial_events_by_trial ON trial_events(trial_id, seq);
-- What a scheduler (other than asha's stopping variant, which keeps
-- asha_records) recorded; replayed at load in seq order (sched_restore).
CREATE TABLE sched_records (
  experiment_id INTEGER NOT NULL,
  seq           INTEGER NOT NULL,
  trial_id      INTEGER NOT NULL,
  record        TEXT NOT NULL
);
CREATE INDEX sched_records_by_experiment ON sched_records(experiment_id, seq);
