-- 004: each worker's own credential. Registration returns a
-- secret for that worker alone; it authenticates every later call of that
-- worker and must survive a server restart. Stored as given (256 random
-- bits, hex): whoever reads the database file (0600) can act as any worker.
ALTER TABLE workers ADD COLUMN secret TEXT NOT NULL DEFAULT '';
