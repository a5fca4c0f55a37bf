DROP TABLE memories;
