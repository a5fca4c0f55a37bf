ALTER TABLE threads DROP COLUMN owner_node;
