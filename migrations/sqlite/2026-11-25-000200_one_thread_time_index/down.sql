CREATE INDEX threads_by_update ON threads (status, updated_at);
