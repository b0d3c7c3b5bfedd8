package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// DefaultTable names the inbox table when Config.Table leaves its name
// empty: "public"."inbox" on PostgreSQL, `inbox` in the connection's
// database on MySQL and MariaDB.
const DefaultTable = migrations.DefaultInboxTable

// MaxConsumerLen is the longest consumer name, in bytes.
const MaxConsumerLen = 200

// maxTopicLen is the most of a topic the table keeps, in bytes (a
// MySQL VARCHAR(255) in utf8mb4 holds 255 characters).
const maxTopicLen = 255

// ErrInvalidConsumer means Config.Consumer is empty, longer than
// MaxConsumerLen or not valid UTF-8.
var ErrInvalidConsumer = errors.New("inbox: invalid consumer name")

// ScopeName is the OpenTelemetry instrumentation scope of the spans that
// Handle and HandleSQL start.
const ScopeName = "github.com/outboxrelay/outboxrelay/inbox"

// Config names the consumer and its inbox table.
type Config struct {
	// Consumer names the consumer whose deliveries are recorded: 1 to
	// MaxConsumerLen bytes of UTF-8. Consumers sharing a table are
	// independent: each applies every event once. Instances of one
	// consumer (a consumer group's members) share its name.
	Consumer string
	// Table is the inbox table, made by `relay migrate up --inbox`
	// (migrations.UpInbox, migrations.UpMySQLInbox). An empty Name means
	// DefaultTable; on MySQL an empty Schema means the connection's
	// database.
	Table outbox.Table
	// MySQL selects the statements of MySQL 8 and MariaDB 10.6+.
	MySQL bool
	// TracerProvider makes the spans of Handle and HandleSQL; nil means
	// otel's global provider.
	TracerProvider trace.TracerProvider
}

// Inbox records which events a consumer has applied, inside the
// transactions that apply them. It is safe for concurrent use and holds no
// connection.
type Inbox struct {
	consumer string
	mysql    bool
	tracer   trace.Tracer
	table    string // quoted
}

// New validates cfg and returns its Inbox.
func New(cfg Config) (*Inbox, error) {
	if cfg.Consumer == "" || len(cfg.Consumer) > MaxConsumerLen || !utf8.ValidString(cfg.Consumer) || strings.ContainsRune(cfg.Consumer, 0) {
		return nil, fmt.Errorf("%w: %q must be 1-%d bytes of UTF-8 without NUL", ErrInvalidConsumer, truncate(cfg.Consumer, 64), MaxConsumerLen)
	}
	if cfg.Table.Name == "" {
		cfg.Table.Name = DefaultTable
	}
	if err := cfg.Table.Validate(); err != nil {
		return nil, err
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	in := &Inbox{consumer: cfg.Consumer, mysql: cfg.MySQL, tracer: tp.Tracer(ScopeName), table: cfg.Table.Ident()}
	if cfg.MySQL {
		in.table = migrations.MySQLIdent(cfg.Table)
	}
	return in, nil
}

// Consumer returns the consumer's name.
func (in *Inbox) Consumer() string { return in.consumer }

// Record records m's event id for the consumer in tx, the transaction
// that applies m's effect, and reports whether it was recorded before: a
// duplicate, whose effect the caller must not apply again (and whose
// delivery it acknowledges). A record is made when tx commits; a
// rollback leaves none, so the next delivery applies the effect.
//
// Two transactions that record one id at once are serialised by the
// table's primary key: the second waits for the first to end, then finds
// a duplicate if it committed, or records the id if it rolled back. Under
// REPEATABLE READ or SERIALIZABLE, PostgreSQL fails the second with a
// serialization error instead; MySQL may end a race with a deadlock
// error. Either error leaves nothing recorded: retry the delivery.
//
// tx is a pgx.Tx, or a database/sql transaction wrapped by
// outbox.FromSQL or outbox.FromMySQL.
func (in *Inbox) Record(ctx context.Context, tx outbox.Executor, m Message) (duplicate bool, err error) {
	if m.ID == (uuid.UUID{}) {
		return false, ErrNoEventID
	}
	var tag interface{ RowsAffected() int64 }
	if in.mysql {
		tag, err = tx.Exec(ctx, "INSERT INTO "+in.table+" (consumer, event_id, topic) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE consumer = consumer",
			in.consumer, m.ID[:], topicOf(m.Topic))
	} else {
		tag, err = tx.Exec(ctx, "INSERT INTO "+in.table+" (consumer, event_id, topic) VALUES ($1, $2, $3) ON CONFLICT (consumer, event_id) DO NOTHING",
			in.consumer, m.ID, topicOf(m.Topic))
	}
	if err != nil {
		return false, fmt.Errorf("inbox: record %s for %q: %w", m.ID, in.consumer, err)
	}
	return tag.RowsAffected() == 0, nil
}

// Beginner starts a pgx transaction: *pgxpool.Pool and *pgx.Conn
// satisfy it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Handle applies m once, on PostgreSQL through pgx: in a transaction of
// db it records m (Record) and, unless m is a duplicate, runs fn with the
// transaction, then commits. fn makes its writes with tx and nothing
// else. duplicate is true when m was recorded before: fn did not run.
// When fn fails, everything is rolled back and its error returned: m is
// not recorded, and its next delivery runs fn again. Acknowledge m to the
// broker when Handle returns a nil error, duplicate or not.
//
// The span "process <topic>" continues the trace of the request that
// wrote the event (Message.Context); fn's ctx carries it.
func (in *Inbox) Handle(ctx context.Context, db Beginner, m Message, fn func(ctx context.Context, tx pgx.Tx) error) (duplicate bool, err error) {
	ctx, span := in.start(ctx, m)
	defer func() { in.end(span, duplicate, err) }()
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("inbox: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit this is a no-op
	if duplicate, err = in.Record(ctx, tx, m); err != nil || duplicate {
		return duplicate, err
	}
	if err := fn(ctx, tx); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("inbox: commit: %w", err)
	}
	return false, nil
}

// HandleSQL is Handle through database/sql, on PostgreSQL (the pgx stdlib
// driver or lib/pq) or, with Config.MySQL, on MySQL and MariaDB
// (go-sql-driver/mysql, whose clientFoundRows must stay false).
func (in *Inbox) HandleSQL(ctx context.Context, db *sql.DB, m Message, fn func(ctx context.Context, tx *sql.Tx) error) (duplicate bool, err error) {
	ctx, span := in.start(ctx, m)
	defer func() { in.end(span, duplicate, err) }()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("inbox: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if duplicate, err = in.Record(ctx, outbox.FromSQL(tx), m); err != nil || duplicate {
		return duplicate, err
	}
	if err := fn(ctx, tx); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("inbox: commit: %w", err)
	}
	return false, nil
}

// AttrDuplicate marks a span of Handle whose message was a duplicate.
const AttrDuplicate = attribute.Key("outbox.duplicate")

func (in *Inbox) start(ctx context.Context, m Message) (context.Context, trace.Span) {
	return in.tracer.Start(m.Context(ctx), "process "+m.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(m.Topic),
			semconv.MessagingMessageID(m.ID.String()),
			semconv.MessagingConsumerGroupName(in.consumer),
		))
}

func (in *Inbox) end(span trace.Span, duplicate bool, err error) {
	span.SetAttributes(AttrDuplicate.Bool(duplicate))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(2, err.Error()) // codes.Error
	}
	span.End()
}

// pruneBatch bounds the rows one statement of Prune deletes.
const pruneBatch = 10_000

// Prune deletes the consumer's records older than keep, at most pruneBatch
// rows per statement, and returns how many it deleted. Run it
// periodically (docs/consumers.md#retention says how long to keep); db
// is a pool or connection, not a transaction, as each batch commits.
func (in *Inbox) Prune(ctx context.Context, db outbox.Executor, keep time.Duration) (int64, error) {
	if keep <= 0 {
		return 0, fmt.Errorf("inbox: prune: keep %v is not positive", keep)
	}
	// The batch is deleted by ctid: joined by event_id instead,
	// PostgreSQL scans the whole table for each batch.
	stmt := "DELETE FROM " + in.table + " WHERE ctid = ANY (ARRAY(SELECT ctid FROM " + in.table +
		" WHERE consumer = $1 AND received_at < now() - make_interval(secs => $2) LIMIT " + strconv.Itoa(pruneBatch) + "))"
	var age any = keep.Seconds()
	if in.mysql {
		stmt = "DELETE FROM " + in.table + " WHERE consumer = ? AND received_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND LIMIT " + strconv.Itoa(pruneBatch)
		age = keep.Microseconds()
	}
	var total int64
	for {
		tag, err := db.Exec(ctx, stmt, in.consumer, age)
		if err != nil {
			return total, fmt.Errorf("inbox: prune %q: %w", in.consumer, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return total, nil
		}
	}
}

// Forget deletes the consumer's records of ids, so that their next
// delivery applies their effect again. Run it before `relay replay` of
// those events when the consumer must process them again
// (docs/consumers.md#replays); it returns how many records it deleted.
func (in *Inbox) Forget(ctx context.Context, db outbox.Executor, ids ...uuid.UUID) (int64, error) {
	var total int64
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 1000)]
		ids = ids[len(chunk):]
		args := []any{in.consumer}
		marks := make([]string, len(chunk))
		for i, id := range chunk {
			if in.mysql {
				marks[i], args = "?", append(args, id[:])
			} else {
				marks[i], args = "$"+strconv.Itoa(i+2), append(args, id)
			}
		}
		consumer := "$1"
		if in.mysql {
			consumer = "?"
		}
		tag, err := db.Exec(ctx, "DELETE FROM "+in.table+" WHERE consumer = "+consumer+" AND event_id IN ("+strings.Join(marks, ", ")+")", args...)
		if err != nil {
			return total, fmt.Errorf("inbox: forget for %q: %w", in.consumer, err)
		}
		total += tag.RowsAffected()
	}
	return total, nil
}

// ForgetTopic deletes the consumer's records of the events of topic it
// received at or after since, so that their next delivery applies their
// effect again; see Forget.
func (in *Inbox) ForgetTopic(ctx context.Context, db outbox.Executor, topic string, since time.Time) (int64, error) {
	stmt := "DELETE FROM " + in.table + " WHERE consumer = $1 AND topic = $2 AND received_at >= $3"
	var from any = since
	if in.mysql {
		// received_at is UTC; as text, the time does not depend on the
		// driver's loc setting.
		stmt = "DELETE FROM " + in.table + " WHERE consumer = ? AND topic = ? AND received_at >= ?"
		from = since.UTC().Format("2006-01-02 15:04:05.999999")
	}
	tag, err := db.Exec(ctx, stmt, in.consumer, topicOf(topic), from)
	if err != nil {
		return 0, fmt.Errorf("inbox: forget topic %q for %q: %w", topic, in.consumer, err)
	}
	return tag.RowsAffected(), nil
}

// topicOf is the topic as the table keeps it: valid UTF-8, at most
// maxTopicLen bytes.
func topicOf(topic string) string {
	topic = strings.ToValidUTF8(topic, "\uFFFD")
	for len(topic) > maxTopicLen {
		_, size := utf8.DecodeLastRuneInString(topic)
		topic = topic[:len(topic)-size]
	}
	return topic
}
