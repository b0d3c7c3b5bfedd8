package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// mysqlOrderedVersion is the MySQL migration that prepares ordered
// delivery's columns and tables (005_ordered).
const mysqlOrderedVersion = 5

// mysqlOrderedTrigger numbers a key's events as they are inserted
// (docs/ordering.md#mysql-and-mariadb): it bumps the topic and key's
// counter row and stores the new number in seq, with the key's SHA-256
// and bucket. The counter row stays locked until the writer's transaction
// ends: writers of one key take turns, and its numbers are dense and in
// commit order. One upsert, one lock request per key: an UPDATE first
// would take a gap lock when the key is new, and two writers of new keys
// in one gap would deadlock. The SELECT reads the row this transaction
// just wrote.
const mysqlOrderedTrigger = `CREATE TRIGGER %[1]s BEFORE INSERT ON %[2]s FOR EACH ROW
BEGIN
    IF NEW.` + "`key`" + ` IS NOT NULL THEN
        SET NEW.khash = UNHEX(SHA2(NEW.` + "`key`" + `, 256));
        SET NEW.bucket = CONV(LEFT(SHA2(NEW.` + "`key`" + `, 256), 3), 16, 10) %% 1024;
        INSERT INTO %[3]s (topic, khash, seq)
        VALUES (NEW.topic, NEW.khash, 1)
        ON DUPLICATE KEY UPDATE seq = seq + 1;
        SET NEW.seq = (SELECT seq FROM %[3]s WHERE topic = NEW.topic AND khash = NEW.khash);
    END IF;
END`

// PrepareOrderedMySQL prepares table, migrated, for ordered delivery on
// MySQL or MariaDB (`relay migrate up --ordered`): it creates the trigger
// that numbers each key's events (docs/ordering.md#mysql-and-mariadb).
// created is false when it was there already. From then on every insert
// of a keyed row locks its key's counter row until the writer's
// transaction ends, which is why only this call creates it.
func PrepareOrderedMySQL(ctx context.Context, db *sql.DB, table outbox.Table) (created bool, err error) {
	err = lockedMySQL(ctx, db, mysqlOutbox, table, func(conn *sql.Conn, done map[int]time.Time) error {
		if _, ok := done[mysqlOrderedVersion]; !ok {
			return fmt.Errorf("prepare ordered delivery: %w", ErrNotMigrated)
		}
		exists, err := OrderedPreparedMySQL(ctx, conn, table)
		if err != nil || exists {
			return err
		}
		q := fmt.Sprintf(mysqlOrderedTrigger, MySQLRelated(table, "ordered"), MySQLIdent(table), MySQLRelated(table, "keys"))
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("migrations: create the ordered trigger of %s: %w", mysqlBase(table), err)
		}
		created = true
		return nil
	})
	return created, err
}

// OrderedPreparedMySQL reports whether table has the trigger
// PrepareOrderedMySQL creates.
func OrderedPreparedMySQL(ctx context.Context, q MySQLQuerier, table outbox.Table) (bool, error) {
	schema, err := mysqlSchema(ctx, q, table)
	if err != nil {
		return false, err
	}
	// SHOW CREATE TRIGGER reads the table's trigger file alone:
	// MariaDB 10.11.19 crashed (signal 11, freeing its temporary table)
	// answering a prepared SELECT on information_schema.TRIGGERS while
	// other databases were being dropped.
	rows, err := q.QueryContext(ctx, "SHOW CREATE TRIGGER "+quoteMySQL(schema)+"."+quoteMySQL(mysqlBase(table)+"_ordered"))
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1360 { // ER_TRG_DOES_NOT_EXIST
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("migrations: look up the ordered trigger of %s: %w", mysqlBase(table), err)
	}
	defer rows.Close()
	found := rows.Next()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("migrations: look up the ordered trigger of %s: %w", mysqlBase(table), err)
	}
	return found, nil
}
