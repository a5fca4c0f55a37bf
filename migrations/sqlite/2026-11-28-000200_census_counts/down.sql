DROP TRIGGER census_thread_deleted;
DROP TRIGGER census_thread_moved;
DROP TRIGGER census_thread_inserted;
DROP TRIGGER census_task_deleted;
DROP TRIGGER census_task_moved;
DROP TRIGGER census_task_inserted;
DROP TABLE census_counts;
