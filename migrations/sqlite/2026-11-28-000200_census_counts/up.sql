-- The census (active threads, tasks by state) reads these counts instead of every row.
-- Counting a store of millions of tasks read the whole tasks table, seconds in one read
-- transaction, and a reader on old pages keeps the WAL from starting over: the WAL grew
-- by every commit meanwhile (gigabytes) and stayed that large on disk. Triggers keep the
-- counts in the transaction that changes the rows, so they are exact at every commit.
-- `what` is 'task' (by state) or 'thread' (by status). (A row is added when a state is
-- first seen with a WHERE NOT EXISTS: an OR IGNORE in a trigger would give way to the
-- conflict policy of the statement that fired it.)
CREATE TABLE census_counts (
    what TEXT    NOT NULL,
    name TEXT    NOT NULL,
    n    INTEGER NOT NULL,
    PRIMARY KEY (what, name)
) WITHOUT ROWID;
INSERT INTO census_counts (what, name, n) SELECT 'task', state, count(*) FROM tasks GROUP BY state;
INSERT INTO census_counts (what, name, n) SELECT 'thread', status, count(*) FROM threads GROUP BY status;

CREATE TRIGGER census_task_inserted AFTER INSERT ON tasks BEGIN
    INSERT INTO census_counts (what, name, n) SELECT 'task', NEW.state, 0
        WHERE NOT EXISTS (SELECT 1 FROM census_counts WHERE what = 'task' AND name = NEW.state);
    UPDATE census_counts SET n = n + 1 WHERE what = 'task' AND name = NEW.state;
END;
CREATE TRIGGER census_task_moved AFTER UPDATE OF state ON tasks
WHEN OLD.state IS NOT NEW.state BEGIN
    UPDATE census_counts SET n = n - 1 WHERE what = 'task' AND name = OLD.state;
    INSERT INTO census_counts (what, name, n) SELECT 'task', NEW.state, 0
        WHERE NOT EXISTS (SELECT 1 FROM census_counts WHERE what = 'task' AND name = NEW.state);
    UPDATE census_counts SET n = n + 1 WHERE what = 'task' AND name = NEW.state;
END;
CREATE TRIGGER census_task_deleted AFTER DELETE ON tasks BEGIN
    UPDATE census_counts SET n = n - 1 WHERE what = 'task' AND name = OLD.state;
END;

CREATE TRIGGER census_thread_inserted AFTER INSERT ON threads BEGIN
    INSERT INTO census_counts (what, name, n) SELECT 'thread', NEW.status, 0
        WHERE NOT EXISTS (SELECT 1 FROM census_counts WHERE what = 'thread' AND name = NEW.status);
    UPDATE census_counts SET n = n + 1 WHERE what = 'thread' AND name = NEW.status;
END;
CREATE TRIGGER census_thread_moved AFTER UPDATE OF status ON threads
WHEN OLD.status IS NOT NEW.status BEGIN
    UPDATE census_counts SET n = n - 1 WHERE what = 'thread' AND name = OLD.status;
    INSERT INTO census_counts (what, name, n) SELECT 'thread', NEW.status, 0
        WHERE NOT EXISTS (SELECT 1 FROM census_counts WHERE what = 'thread' AND name = NEW.status);
    UPDATE census_counts SET n = n + 1 WHERE what = 'thread' AND name = NEW.status;
END;
CREATE TRIGGER census_thread_deleted AFTER DELETE ON threads BEGIN
    UPDATE census_counts SET n = n - 1 WHERE what = 'thread' AND name = OLD.status;
END;
