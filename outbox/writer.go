package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Executor is what the Writer needs from the caller's transaction. pgx.Tx,
// *pgx.Conn and *pgxpool.Pool satisfy it; wrap a database/sql transaction
// with FromSQL on PostgreSQL, or with FromMySQL on MySQL and MariaDB. When the Executor also has pgx's CopyFrom, WriteBatch uses
// COPY for batches that cannot hold duplicates.
type Executor interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// copier is the optional COPY surface of pgx.Tx, *pgx.Conn and *pgxpool.Pool.
type copier interface {
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error)
}

// WriterConfig configures a Writer. The zero value is usable.
type WriterConfig struct {
	// Table is the outbox table. Defaults to "public"."outbox".
	Table Table
	// MaxPayloadBytes rejects larger payloads with ErrPayloadTooLarge.
	// Defaults to DefaultMaxPayloadBytes (1 MiB).
	MaxPayloadBytes int
}

// Result reports what happened to one written message.
type Result struct {
	// ID is the event id, generated unless the message carried one. For a
	// duplicate it is the id of the row already in the table.
	ID uuid.UUID
	// Duplicate is true when a row with the same ID or DedupKey already
	// existed, so nothing was written. The caller's transaction is unharmed.
	Duplicate bool
}

// Writer inserts messages into the outbox table. It is safe for concurrent
// use and holds no connection of its own.
type Writer struct {
	table      Table
	maxPayload int
	insertHead string // INSERT INTO ... (columns) VALUES
	mysqlTable string // the table quoted for MySQL (see FromMySQL)
}

// maxChunk bounds the rows of one INSERT statement (7 parameters a row, far
// below PostgreSQL's 65535-parameter limit). Chunks are powers of two, so a
// connection prepares at most 11 statement shapes whatever the batch sizes.
const maxChunk = 1024

// NewWriter validates cfg and returns a Writer.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if err := cfg.Table.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxPayloadBytes < 0 {
		return nil, fmt.Errorf("outbox: MaxPayloadBytes %d is negative", cfg.MaxPayloadBytes)
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	return &Writer{
		table:      cfg.Table.WithDefaults(),
		maxPayload: cfg.MaxPayloadBytes,
		mysqlTable: mysqlIdent(cfg.Table),
		insertHead: "INSERT INTO " + cfg.Table.Ident() +
			" (id, topic, key, payload, headers, dedup_key, next_retry_at)\nVALUES ",
	}, nil
}

var defaultWriter, _ = NewWriter(WriterConfig{})

// Write inserts msg into "public"."outbox" inside tx with the default limits;
// see Writer.Write.
func Write(ctx context.Context, tx Executor, msg Message) (Result, error) {
	return defaultWriter.Write(ctx, tx, msg)
}

// WriteBatch inserts msgs into "public"."outbox" inside tx with the default
// limits; see Writer.WriteBatch.
func WriteBatch(ctx context.Context, tx Executor, msgs []Message) ([]Result, error) {
	return defaultWriter.WriteBatch(ctx, tx, msgs)
}

// Write validates msg and inserts it inside tx. The message is published
// only if tx commits. A message whose ID or DedupKey is already in the table
// is not written again: Result.Duplicate is true and tx stays usable.
// Validation failures return a *ValidationError before any SQL runs.
//
// When ctx holds an OpenTelemetry span (or a remote span context), its W3C
// trace context is stored in the row's headers as traceparent (and
// tracestate when not empty), unless msg.Headers already has a
// traceparent; the relay's tracing wrapper (publishers/tracing) parents its
// span to it, so the consumer continues the writer's trace. msg.Headers is
// never modified. Without a span nothing is added.
func (w *Writer) Write(ctx context.Context, tx Executor, msg Message) (Result, error) {
	if err := msg.validate(0, w.maxPayload); err != nil {
		return Result{}, err
	}
	callerID := msg.ID != uuid.Nil
	row, err := newRow(&msg, traceContextOf(ctx))
	if err != nil {
		return Result{}, err
	}
	if m, ok := tx.(mysqlExecutor); ok {
		results := []Result{{ID: msg.ID}}
		if err := w.writeMySQL(ctx, m.tx, []mysqlMessage{newMySQLMessage(row, callerID)}, results); err != nil {
			return Result{}, err
		}
		return results[0], nil
	}
	tag, err := tx.Exec(ctx, w.insertHead+placeholders(1)+onConflict, row...)
	if err != nil {
		return Result{}, fmt.Errorf("outbox: insert into %s: %w", w.table, err)
	}
	res := Result{ID: msg.ID, Duplicate: tag.RowsAffected() == 0}
	if res.Duplicate && msg.DedupKey != "" {
		if res.ID, err = w.existingID(ctx, tx, msg.DedupKey, msg.ID); err != nil {
			return Result{}, err
		}
	}
	return res, nil
}

// WriteBatch validates every message first, then inserts them all inside tx
// (COPY when tx supports it and no message can be a duplicate, multi-row
// INSERT otherwise; on MySQL, see FromMySQL, multi-row INSERTs of at most
// 1024 rows and about 4 MiB each). Results are in the order of msgs. If any message is
// invalid, nothing is written and the *ValidationError names its index.
// Every message gets ctx's trace context, as with Write.
func (w *Writer) WriteBatch(ctx context.Context, tx Executor, msgs []Message) ([]Result, error) {
	rows := make([][]any, len(msgs))
	results := make([]Result, len(msgs))
	mayDuplicate, delayed := false, false
	tc := traceContextOf(ctx)
	var mysqlMsgs []mysqlMessage
	if _, ok := tx.(mysqlExecutor); ok {
		mysqlMsgs = make([]mysqlMessage, len(msgs))
	}
	for i := range msgs {
		msg := msgs[i]
		if err := msg.validate(i, w.maxPayload); err != nil {
			return nil, err
		}
		callerID := msg.ID != uuid.Nil
		mayDuplicate = mayDuplicate || callerID || msg.DedupKey != ""
		delayed = delayed || !msg.DeliverAt.IsZero()
		row, err := newRow(&msg, tc)
		if err != nil {
			return nil, err
		}
		rows[i] = row
		results[i].ID = msg.ID
		if mysqlMsgs != nil {
			mysqlMsgs[i] = newMySQLMessage(row, callerID)
		}
	}
	if m, ok := tx.(mysqlExecutor); ok {
		if err := w.writeMySQL(ctx, m.tx, mysqlMsgs, results); err != nil {
			return nil, err
		}
		return results, nil
	}
	if c, ok := tx.(copier); ok && !mayDuplicate && !delayed {
		src := pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) { return rows[i][:len(copyColumns)], nil })
		if _, err := c.CopyFrom(ctx, pgx.Identifier{w.table.Schema, w.table.Name}, copyColumns, src); err != nil {
			return nil, fmt.Errorf("outbox: copy into %s: %w", w.table, err)
		}
		return results, nil
	}
	for start := 0; start < len(rows); {
		end := start + chunkSize(len(rows)-start)
		if err := w.insertChunk(ctx, tx, rows[start:end], results[start:end], mayDuplicate); err != nil {
			return nil, err
		}
		start = end
	}
	return results, nil
}

// chunkSize is the largest power of two not above remaining or maxChunk.
func chunkSize(remaining int) int {
	n := 1
	for n*2 <= remaining && n*2 <= maxChunk {
		n *= 2
	}
	return n
}

// insertChunk writes one multi-row INSERT. When rows may be duplicates it
// reads back the inserted ids to mark the others.
func (w *Writer) insertChunk(ctx context.Context, tx Executor, rows [][]any, results []Result, mayDuplicate bool) error {
	args := make([]any, 0, len(rows)*len(rows[0]))
	for _, r := range rows {
		args = append(args, r...)
	}
	query := w.insertHead + placeholders(len(rows)) + onConflict
	if !mayDuplicate {
		if _, err := tx.Exec(ctx, query, args...); err != nil {
			return fmt.Errorf("outbox: insert into %s: %w", w.table, err)
		}
		return nil
	}
	var inserted string
	query = "WITH ins AS (\n" + query + "\nRETURNING id\n)\nSELECT coalesce(string_agg(id::text, ','), '') FROM ins"
	if err := tx.QueryRow(ctx, query, args...).Scan(&inserted); err != nil {
		return fmt.Errorf("outbox: insert into %s: %w", w.table, err)
	}
	fresh := make(map[string]bool, len(rows))
	for _, id := range strings.Split(inserted, ",") {
		fresh[id] = true
	}
	for i := range results {
		id := results[i].ID.String()
		if fresh[id] {
			delete(fresh, id) // a second message with the same id is a duplicate
			continue
		}
		results[i].Duplicate = true
		if dedup, _ := rows[i][5].(string); dedup != "" {
			id, err := w.existingID(ctx, tx, dedup, results[i].ID)
			if err != nil {
				return err
			}
			results[i].ID = id
		}
	}
	return nil
}

// existingID returns the id of the row holding dedupKey. When no row holds
// it, the conflict was on the message's own id, which is returned.
func (w *Writer) existingID(ctx context.Context, tx Executor, dedupKey string, own uuid.UUID) (uuid.UUID, error) {
	var id string
	err := tx.QueryRow(ctx, "SELECT id::text FROM "+w.table.Ident()+" WHERE dedup_key = $1", dedupKey).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) {
		return own, nil
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("outbox: look up duplicate of dedup key: %w", err)
	}
	return uuid.Parse(id)
}

const onConflict = "\nON CONFLICT DO NOTHING"

// copyColumns are the leading columns of newRow. COPY is used only when no
// message has a DedupKey or DeliverAt, so next_retry_at takes its default,
// now(), and dedup_key stays NULL.
var copyColumns = []string{"id", "topic", "key", "payload", "headers"}

// newRow assigns the id when missing and returns the column values in the
// order of the INSERT. The headers stored are msg's, with the trace
// context tc added (see traceContext.headersWith); tc nil adds nothing.
func newRow(msg *Message, tc *traceContext) ([]any, error) {
	if msg.ID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("outbox: generate event id: %w", err)
		}
		msg.ID = id
	}
	headers := "{}"
	if h := tc.headersWith(msg.Headers); len(h) > 0 {
		b, err := json.Marshal(h)
		if err != nil {
			return nil, fmt.Errorf("outbox: encode headers: %w", err)
		}
		headers = string(b)
	}
	// Untyped nil, not a nil []byte: some drivers (lib/pq) send a nil []byte
	// as an empty value, and an empty key is not the same as no key.
	var key, dedup, deliverAt any
	if msg.Key != nil {
		key = msg.Key
	}
	if msg.DedupKey != "" {
		dedup = msg.DedupKey
	}
	if !msg.DeliverAt.IsZero() {
		deliverAt = msg.DeliverAt
	}
	payload := msg.Payload
	if payload == nil {
		payload = []byte{}
	}
	// The id as pgtype.UUID: pgx encodes it in binary, where uuid.UUID, a
	// driver.Valuer, costs a failed binary plan and a text encoding (19 more
	// allocations per Write); database/sql drivers get its Value, a string.
	id := pgtype.UUID{Bytes: msg.ID, Valid: true}
	return []any{id, msg.Topic, key, payload, headers, dedup, deliverAt}, nil
}

// placeholders returns n rows of typed parameters for the INSERT.
func placeholders(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(",\n")
		}
		p := i * 7
		b.WriteString("($" + strconv.Itoa(p+1) + "::uuid, $" + strconv.Itoa(p+2) + "::text, $" + strconv.Itoa(p+3) +
			"::bytea, $" + strconv.Itoa(p+4) + "::bytea, $" + strconv.Itoa(p+5) + "::jsonb, $" + strconv.Itoa(p+6) +
			"::text, coalesce($" + strconv.Itoa(p+7) + "::timestamptz, now()))")
	}
	return b.String()
}
