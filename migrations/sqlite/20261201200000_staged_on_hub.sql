-- A job whose Metal check runs with the Hub as the rendezvous: the worker commits the repaired bundle to the
-- (still private) mirror and records here, as JSON, the staged commit and its local checks; a runner that
-- reaches only the database and the Hub checks that commit, and any worker publishes it afterwards.
ALTER TABLE jobs ADD COLUMN staged TEXT;
