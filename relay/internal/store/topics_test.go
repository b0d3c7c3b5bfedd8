package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/route"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// OrderedTopics gives one LIKE pattern per pattern, and all when one of
// them is made of *s alone.
func TestOrderedTopicsAll(t *testing.T) {
	for _, c := range []struct {
		patterns []string
		all      bool
	}{
		{nil, false},
		{[]string{"orders"}, false},
		{[]string{"orders.*", "*"}, true},
		{[]string{"**"}, true},
		{[]string{""}, false},
	} {
		all, like := store.OrderedTopics(c.patterns)
		if all != c.all || like == nil || len(like) != len(c.patterns) {
			t.Errorf("OrderedTopics(%q) = %v, %q; want all %v and one LIKE pattern each", c.patterns, all, like, c.all)
		}
	}
}

// likeTopics are the topics the LIKE patterns are tried on, and
// likePatterns the patterns, each of which must match on the outbox table
// of every database what it matches as a route (publishers/route).
var (
	likeTopics = []string{"orders", "orders.", "orders.created", "Orders.created", "billing.created",
		"pay_in", "payXin", "pay_in.x", "a-x-b-y-c", "a-c-b", "a_b_c"}
	likePatterns = []string{"orders.*", "orders", "*.created", "pay_in", "pay_in*", "a*b*c", "a_b*", "*"}
)

// wantMatched returns the likeTopics pattern matches as a route does.
func wantMatched(pattern string) []string {
	var out []string
	for _, topic := range likeTopics {
		if (route.Rule{Pattern: pattern}).Matches(topic) {
			out = append(out, topic)
		}
	}
	return out
}

// On PostgreSQL, "topic LIKE ANY(patterns)", as the statements of pgstore
// say it, holds for the topics the patterns match as routes: a topic's _
// stands for itself, a pattern's * for any run of characters.
func TestOrderedTopicsMatchOnPostgreSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table := testdb.New(t)
	for _, topic := range likeTopics {
		if _, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+" (topic, payload) VALUES ($1, '\\x00')", topic); err != nil {
			t.Fatal(err)
		}
	}
	matched := func(patterns ...string) []string {
		t.Helper()
		_, like := store.OrderedTopics(patterns)
		rows, err := pool.Query(ctx, "SELECT topic FROM "+table.Ident()+" WHERE topic LIKE ANY($1::text[])", like)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			var topic string
			if err := rows.Scan(&topic); err != nil {
				t.Fatal(err)
			}
			out = append(out, topic)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	for _, p := range likePatterns {
		want := wantMatched(p)
		slices.Sort(want)
		if got := matched(p); !slices.Equal(got, want) {
			t.Errorf("pattern %q matched %q, want %q", p, got, want)
		}
	}
	if got := matched("pay_in", "orders"); !slices.Equal(got, []string{"orders", "pay_in"}) {
		t.Errorf("patterns pay_in and orders matched %q, want both topics", got)
	}
}

// On MariaDB "topic LIKE p", p read from a JSON array as mysqlstore's
// statements read it, holds for the topics p's pattern matches as a route, with NO_BACKSLASH_ESCAPES in sql_mode or without: \ stays LIKE's
// escape character there.
func TestOrderedTopicsMatchOnMySQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := mariadbtest.DB(t)
	if _, err := migrations.UpMySQL(ctx, db, outbox.Table{}); err != nil {
		t.Fatal(err)
	}
	for _, topic := range likeTopics {
		id := uuid.New()
		if _, err := db.ExecContext(ctx, "INSERT INTO outbox (id, topic, payload) VALUES (?, ?, 'p')", id[:], topic); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	matched := func(conn *sql.Conn, like string) []string {
		t.Helper()
		// As mysqlstore's statements read the patterns: a JSON array
		// through JSON_TABLE.
		patterns, _ := json.Marshal([]string{like})
		rows, err := conn.QueryContext(ctx, "SELECT topic FROM outbox WHERE EXISTS (SELECT 1 FROM JSON_TABLE(?, '$[*]' COLUMNS "+
			"(p VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS o WHERE topic LIKE o.p) ORDER BY topic", patterns)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var topic string
			if err := rows.Scan(&topic); err != nil {
				t.Fatal(err)
			}
			out = append(out, topic)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, mode := range []string{"", "NO_BACKSLASH_ESCAPES"} {
		if mode != "" {
			if _, err := conn.ExecContext(ctx, "SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',', ?)", mode); err != nil {
				t.Fatal(err)
			}
			var modes string
			if err := conn.QueryRowContext(ctx, "SELECT @@SESSION.sql_mode").Scan(&modes); err != nil || !strings.Contains(modes, mode) {
				t.Fatalf("sql_mode %q (%v): want %s in it", modes, err, mode)
			}
		}
		_, like := store.OrderedTopics(likePatterns)
		for i, p := range likePatterns {
			want := wantMatched(p)
			slices.Sort(want)
			if got := matched(conn, like[i]); !slices.Equal(got, want) {
				t.Errorf("sql_mode +%q: pattern %q matched %q, want %q", mode, p, got, want)
			}
		}
	}
}
