DROP INDEX threads_by_update;
