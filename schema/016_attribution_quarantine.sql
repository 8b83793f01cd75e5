-- 016: failures told apart and bad machines (docs/scheduling.md#failures-told-apart).
--   trials.attribution   who its last failed attempt is blamed on: config,
--                        machine, user_code, resource or unknown (NULL: it
--                        never failed, or a row from before 016)
--   workers.quarantine   why the worker gets no lease (NULL: in service), so
--                        a restart keeps a bad machine out
-- Columns added, no rebuild (as 008 and 010).
ALTER TABLE trials ADD COLUMN attribution TEXT;
ALTER TABLE workers ADD COLUMN quarantine TEXT;
