-- inbox 001: drops the inbox table.
DROP TABLE IF EXISTS {{.Table}};
