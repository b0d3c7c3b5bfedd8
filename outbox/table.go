package outbox

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
)

// DefaultSchema and DefaultTable name the outbox table when a Table leaves
// them empty.
const (
	DefaultSchema = "public"
	DefaultTable  = "outbox"
)

// maxTableNameLen leaves room for the suffixes of index and helper-table
// names derived from the table name within PostgreSQL's 63-byte limit.
const maxTableNameLen = 40

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Table names the outbox table. The zero value means "public"."outbox".
// Names are validated (plain identifiers only) and always quoted in SQL, never
// pasted raw.
type Table struct {
	// Schema holds the table. Defaults to "public".
	Schema string
	// Name is the table name, at most 40 bytes. Defaults to "outbox".
	Name string
}

// WithDefaults returns t with empty fields replaced by the defaults.
func (t Table) WithDefaults() Table {
	if t.Schema == "" {
		t.Schema = DefaultSchema
	}
	if t.Name == "" {
		t.Name = DefaultTable
	}
	return t
}

// Validate reports whether the (defaulted) schema and table names are plain
// identifiers. The error wraps ErrInvalidIdentifier.
func (t Table) Validate() error {
	t = t.WithDefaults()
	if err := validIdent("schema", t.Schema, 63); err != nil {
		return err
	}
	return validIdent("table", t.Name, maxTableNameLen)
}

func validIdent(what, s string, max int) error {
	if len(s) > max || !identRE.MatchString(s) {
		return fmt.Errorf("%w: %s name %q must match [A-Za-z_][A-Za-z0-9_]* and be at most %d bytes", ErrInvalidIdentifier, what, s, max)
	}
	return nil
}

// Ident returns the quoted, schema-qualified table name for use in SQL.
func (t Table) Ident() string {
	t = t.WithDefaults()
	return pgx.Identifier{t.Schema, t.Name}.Sanitize()
}

// Related returns the quoted, schema-qualified name of a helper object that
// belongs to this table, such as Related("migrations") for
// "public"."outbox_migrations".
func (t Table) Related(suffix string) string {
	t = t.WithDefaults()
	return pgx.Identifier{t.Schema, t.Name + "_" + suffix}.Sanitize()
}

// Channel returns the name of the notification channel that inserts into
// the table notify (migration 003) and relays LISTEN on: "schema.name",
// or, beyond PostgreSQL's 63-byte limit, its first 54 bytes, "_" and the
// first 8 hex digits of its md5.
func (t Table) Channel() string {
	t = t.WithDefaults()
	c := t.Schema + "." + t.Name
	if len(c) > 63 {
		sum := md5.Sum([]byte(c))
		c = c[:54] + "_" + hex.EncodeToString(sum[:])[:8]
	}
	return c
}

// String returns schema.name, unquoted, for messages.
func (t Table) String() string {
	t = t.WithDefaults()
	return t.Schema + "." + t.Name
}
