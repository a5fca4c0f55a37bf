-- Start-up recovery orders the continuable threads by expiry (a thread's expiry moves
-- with every message, so the latest to expire are the most recently continued) and is
-- served by threads_by_expiry; the index on the update time cost every thread write an
-- index entry for one query at start-up.
DROP INDEX threads_by_update;
