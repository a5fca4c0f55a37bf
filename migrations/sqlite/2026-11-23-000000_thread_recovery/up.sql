-- Start-up recovery loads the most recently updated active threads first, across all
-- tenants; this index serves that query without sorting the whole table.
CREATE INDEX threads_by_update ON threads (status, updated_at);
