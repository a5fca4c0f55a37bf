-- The census (active threads, tasks by state) reads these counts instead of every row.
-- Counting a store of millions of tasks read the whole tasks table, seconds in one read
-- transaction, and a reader on old pages keeps the WAL from starting over: the WAL grew
-- by every commit meanwhile (gigabytes) and stayed that large on disk. Triggers keep the
-- counts in the transaction that changes the rows, so they are exact at every commit.
-- `what` is 'task' (by state) or 'thread' (by status). Every state and status the server
-- writes has its row from the start, so each trigger is one UPDATE of this one-page
-- table.
CREATE TABLE census_counts (
    what TEXT    NOT NULL,
    name TEXT    NOT NULL,
    n    INTEGER NOT NULL,
    PRIMARY KEY (what, name)
) WITHOUT ROWID;
INSERT INTO census_counts (what, name, n) SELECT 'task', state, count(*) FROM tasks GROUP BY state;
INSERT INTO census_counts (what, name, n) SELECT 'thread', status, count(*) FROM threads GROUP BY status;
INSERT OR IGNORE INTO census_counts (what, name, n) VALUES
    ('task', 'submitted', 0), ('task', 'working', 0), ('task', 'input_required', 0),
    ('task', 'auth_required', 0), ('task', 'completed', 0), ('task', 'canceled', 0),
    ('task', 'failed', 0), ('task', 'rejected', 0),
    ('thread', 'active', 0), ('thread', 'expired', 0);

CREATE TRIGGER census_task_inserted AFTER INSERT ON tasks BEGIN
    UPDATE census_counts SET n = n + 1 WHERE what = 'task' AND name = NEW.state;
END;
CREATE TRIGGER census_task_moved AFTER UPDATE OF state ON tasks
WHEN OLD.state IS NOT NEW.state BEGIN
    UPDATE census_counts SET n = n + CASE name WHEN NEW.state THEN 1 ELSE -1 END
    WHERE what = 'task' AND name IN (OLD.state, NEW.state);
END;
CREATE TRIGGER census_task_deleted AFTER DELETE ON tasks BEGIN
    UPDATE census_counts SET n = n - 1 WHERE what = 'task' AND name = OLD.state;
END;

CREATE TRIGGER census_thread_inserted AFTER INSERT ON threads BEGIN
    UPDATE census_counts SET n = n + 1 WHERE what = 'thread' AND name = NEW.status;
END;
CREATE TRIGGER census_thread_moved AFTER UPDATE OF status ON threads
WHEN OLD.status IS NOT NEW.status BEGIN
    UPDATE census_counts SET n = n + CASE name WHEN NEW.status THEN 1 ELSE -1 END
    WHERE what = 'thread' AND name IN (OLD.status, NEW.status);
END;
CREATE TRIGGER census_thread_deleted AFTER DELETE ON threads BEGIN
    UPDATE census_counts SET n = n - 1 WHERE what = 'thread' AND name = OLD.status;
END;
