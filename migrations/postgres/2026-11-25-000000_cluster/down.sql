DROP TABLE thread_owners;
DROP TABLE cluster_nodes;
