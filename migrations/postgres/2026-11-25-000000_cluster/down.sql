DROP TABLE cluster_nodes;
ALTER TABLE threads DROP COLUMN owner_node;
