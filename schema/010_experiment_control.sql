-- 010: experiment control (docs/protocol.md#experiment-control).
-- An experiment gains a priority (its fair share of leases: a number > 0,
-- default 1), free-form notes and tags (a JSON array of strings), all
-- editable live with PATCH /api/v1/experiments/{id}. The status column
-- also takes 'PAUSED' (POST .../pause); it is TEXT, nothing to change.
-- num_samples, max_concurrent_trials and scheduler.max_t are edited inside
-- the stored config itself, so a restart re-reads the edited plan.
-- Columns added, no rebuild (as 008).
ALTER TABLE experiments ADD COLUMN priority REAL NOT NULL DEFAULT 1;
ALTER TABLE experiments ADD COLUMN notes TEXT NOT NULL DEFAULT '';
ALTER TABLE experiments ADD COLUMN tags TEXT NOT NULL DEFAULT '[]';
