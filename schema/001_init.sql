-- 001: the first ctune-server schema. Applied once, tracked by PRAGMA user_version.
-- seq columns share one global change counter (the dashboard's ?since=).
CREATE TABLE experiments (
  id          INTEGER PRIMARY KEY,
  name        TEXT NOT NULL,
  status      TEXT NOT NULL,            -- RUNNING | TERMINATED | CANCELLED
  config      TEXT NOT NULL,            -- the submitted config, as sent
  seed        INTEGER NOT NULL,         -- the seed used (picked when absent)
  created_at  REAL NOT NULL,
  ended_at    REAL,
  updated_seq INTEGER NOT NULL
);

CREATE TABLE trials (
  id            INTEGER PRIMARY KEY,
  experiment_id INTEGER NOT NULL REFERENCES experiments(id),
  idx           INTEGER NOT NULL,       -- creation order inside the experiment
  name          TEXT NOT NULL,
  status        TEXT NOT NULL,          -- PENDING RUNNING PAUSED TERMINATED ERROR
  stopped_early INTEGER NOT NULL DEFAULT 0,
  config        TEXT NOT NULL,
  bracket       INTEGER NOT NULL DEFAULT 0,
  error         TEXT,
  exit_code     INTEGER,
  num_failures  INTEGER NOT NULL DEFAULT 0,
  attempt       INTEGER NOT NULL DEFAULT 0,
  worker_id     INTEGER,
  created_at    REAL NOT NULL,
  started_at    REAL,
  ended_at      REAL,
  updated_seq   INTEGER NOT NULL
);
CREATE INDEX trials_by_experiment ON trials(experiment_id, idx);

-- One row per acknowledged result; (trial_id, t) is the idempotency key.
CREATE TABLE results (
  seq           INTEGER PRIMARY KEY,
  trial_id      INTEGER NOT NULL REFERENCES trials(id),
  experiment_id INTEGER NOT NULL,
  t             REAL NOT NULL,
  decision      TEXT NOT NULL,          -- continue | stop
  data          TEXT NOT NULL,          -- the flat object as posted
  UNIQUE (trial_id, t)
);
CREATE INDEX results_by_experiment ON results(experiment_id, seq);

-- What ASHA recorded, written in the result's transaction so a restart
-- rebuilds exactly the same brackets.
CREATE TABLE asha_records (
  experiment_id INTEGER NOT NULL,
  trial_id      INTEGER NOT NULL,
  bracket       INTEGER NOT NULL,
  milestone     REAL NOT NULL,
  value         REAL,                   -- NULL stands for NaN
  stopped_early INTEGER NOT NULL,
  seq           INTEGER NOT NULL
);
CREATE INDEX asha_by_experiment ON asha_records(experiment_id, seq);

CREATE TABLE workers (
  id             INTEGER PRIMARY KEY,
  name           TEXT NOT NULL,
  cpu            REAL NOT NULL,
  gpu            REAL NOT NULL,
  memory_mb      INTEGER NOT NULL,
  registered_at  REAL NOT NULL,
  last_heartbeat REAL NOT NULL
);

CREATE TABLE checkpoints (
  trial_id  INTEGER PRIMARY KEY REFERENCES trials(id),
  iteration INTEGER NOT NULL,
  crc32     INTEGER NOT NULL,
  data      BLOB NOT NULL
);

CREATE TABLE logs (
  trial_id INTEGER PRIMARY KEY REFERENCES trials(id),
  log      TEXT NOT NULL
);
