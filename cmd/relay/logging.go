package main

import (
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"strings"

	"github.com/outboxrelay/outboxrelay/internal/mysqldsn"
)

// newLogger builds the process logger; format is "text" or "json", level one
// of debug, info, warn, error. Durations read the same in both formats:
// "30s", "1m30s", "100µs" (JSON would print nanoseconds otherwise).
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError("invalid value for --log-level (%s): %q; use debug, info, warn or error", envName("log-level"), level)
	}
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: durationsAsText}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError("invalid value for --log-format (%s): %q; use text or json", envName("log-format"), format)
}

// durationsAsText writes a duration as time.Duration.String does, in
// groups too.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// kvPassword matches password=value in a key=value connection string, where
// the value is quoted or unquoted with backslash escapes (libpq's rules).
var kvPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|(?:[^\s\\]|\\.)+\\?)`)

// redactDSN hides the password (and the client key's sslpassword) of a
// PostgreSQL URL or key=value connection string, or of a mysql:// or
// mariadb:// URL, so that it can be logged.
func redactDSN(dsn string) string {
	if mysqldsn.IsURL(dsn) {
		return mysqldsn.Redact(dsn)
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "(unparseable database URL)"
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		// sslpassword is the passphrase of the client key (pgx reads it).
		for _, key := range []string{"password", "sslpassword"} {
			if q.Has(key) {
				q.Set(key, "xxxxx")
				u.RawQuery = q.Encode()
			}
		}
		return u.String()
	}
	return kvPassword.ReplaceAllString(dsn, "${1}xxxxx")
}
