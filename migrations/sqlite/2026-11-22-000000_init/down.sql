DROP TABLE task_events;
DROP TABLE task_history;
DROP TABLE tasks;
DROP TABLE messages;
DROP TABLE threads;
