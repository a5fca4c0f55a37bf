-- Cluster mode is Postgres only; the column keeps both schemas column-for-column
-- identical (src/store/schema.rs). It stays NULL on SQLite.
ALTER TABLE threads ADD COLUMN owner_node TEXT;
