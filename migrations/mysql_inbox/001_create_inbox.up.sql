-- inbox 001 (MySQL/MariaDB): the inbox table, as PostgreSQL's inbox 001.
-- event_id is the UUID in 16 bytes, as in the outbox table; received_at
-- is UTC. utf8mb4_bin compares consumer names byte for byte.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    consumer    VARCHAR(200) NOT NULL,
    event_id    BINARY(16)   NOT NULL,
    topic       VARCHAR(255) NOT NULL,
    received_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (consumer, event_id),
    KEY received_idx (consumer, received_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
