-- The triggers again (the counts are exact: the writer kept them).
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
