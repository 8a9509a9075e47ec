-- A mirror follows its source's rename: `source_repo` takes the new name once the Hub confirms the move, and
-- `moved_from` keeps the name the mirror's published manifest still names, until the next publication names
-- the new one. Publishing accepts a mirror whose manifest names either.
-- `repos.state` gains `renamed`: the Hub answers the name with another repo (`last_error` names it).
ALTER TABLE mirrors ADD COLUMN moved_from TEXT;
