DROP INDEX tasks_open;
