package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	consoleapi "github.com/outboxrelay/outboxrelay/internal/console"
)

const consoleSynopsis = `Usage: relay console [flags]

Serves the web console at http://LISTEN/ and the admin commands as an HTTP JSON
API on --listen, until SIGTERM/SIGINT:
  GET  /api/status                  what relay status --json prints
  GET  /api/failed                  failed rows without payloads: ?topic=&group=&after=&limit=
  GET  /api/failed/{id}             one failed row; ?payload=1 with a write token adds its payload
  GET  /api/groups                  the failure groups, largest first
  POST /api/groups/{fp}/retry       body {"dry_run": true} counts the group's rows;
  POST /api/groups/{fp}/purge       {"confirm": N} acts only if the group has N rows, on at most N
  GET  /api/audit                   the audit trail, newest first: ?before=&limit=
  POST /api/replay                  body {"ids": [...]}, or {"topics": [...]} and "sent" or "created":
                                    {"from": TIME, "to": TIME}, with "dry_run" or "confirm" as above

Requests carry "Authorization: Bearer SECRET". Tokens are name:role:secret
(role read or write, the secret at least 16 characters), one a line in the file
--console-tokens, or separated by spaces in OUTBOX_CONSOLE_TOKENS; changes are
audited as console:<name>. Without tokens the console serves only loopback
clients (and --listen must be loopback), acting as console:loopback.`

// defaultConsoleAddr is relay console's --listen.
const defaultConsoleAddr = "127.0.0.1:8089"

// consoleTokensEnv holds tokens themselves; --console-tokens names a file.
const consoleTokensEnv = "OUTBOX_CONSOLE_TOKENS"

func runConsole(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := newFlags("relay console", consoleSynopsis, stdout, getenv)
	o := adminOptions{actor: "console"} // each request acts as console:<token name>
	o.db.register(f, "")
	f.Duration(&o.timeout, "timeout", time.Minute, "give up when the database does not answer at start, or a request has not finished, within this time")
	f.String(&o.logFormat, "log-format", "text", "log format: text or json")
	f.String(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error; each change is logged at info")
	var listen, tokensFile string
	f.String(&listen, "listen", defaultConsoleAddr, "host:port to serve the API on; an address other than loopback needs tokens")
	f.commandLineOnly("listen") // OUTBOX_LISTEN is relay run's listener
	f.String(&tokensFile, "console-tokens", "", "file of tokens, one name:role:secret a line; "+consoleTokensEnv+" holds tokens themselves")
	f.commandLineOnly("console-tokens")
	var tokens consoleapi.Tokens
	if err := parseAdmin(f, &o, args, func(errs *problems) {
		if len(f.args()) > 0 {
			errs.add(usageError("unexpected arguments %q", f.args()))
		}
		var err error
		tokens, err = consoleTokens(tokensFile, getenv(consoleTokensEnv))
		errs.add(err)
		if _, _, err := net.SplitHostPort(listen); err != nil {
			errs.add(usageError("invalid value for --listen: %q is not host:port, e.g. %s", listen, defaultConsoleAddr))
		} else if len(tokens) == 0 && !isLoopbackAddr(listen) {
			errs.add(usageError("--listen %q is not a loopback address (127.0.0.1, ::1 or localhost): "+
				"give tokens (--console-tokens FILE or %s) so that whoever reaches it must present one", listen, consoleTokensEnv))
		}
	}); err != nil {
		return err
	}
	logger, err := newLogger(stderr, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	openCtx, cancel := context.WithTimeout(ctx, o.timeout)
	adm, closeDB, err := o.open(openCtx, stderr)
	cancel()
	if err != nil {
		return err
	}
	defer closeDB()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	api := consoleapi.Handler(adm, tokens)
	go api.Sample(ctx, 30*time.Second) // the overview's chart of the last hour
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), o.timeout)
			defer cancel()
			api.ServeHTTP(w, r.WithContext(ctx))
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	auth := fmt.Sprintf("%d tokens", len(tokens))
	if len(tokens) == 0 {
		auth = "none: loopback clients only"
	}
	logger.Info("console serving", "addr", ln.Addr().String(), "table", adm.Name(), "auth", auth)
	select {
	case err := <-done:
		return fmt.Errorf("console: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("console: shut down: %w", err)
	}
	logger.Info("console stopped")
	return nil
}

// consoleTokens reads the tokens of file (if any) and of env. Errors name
// where a token is, never its secret.
func consoleTokens(file, env string) (consoleapi.Tokens, error) {
	text := ""
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, usageError("--console-tokens: %v", err)
		}
		text = string(b)
	}
	fromFile, err := consoleapi.ParseTokens(text)
	if err != nil {
		return nil, usageError("--console-tokens %s: %v", file, err)
	}
	fromEnv, err := consoleapi.ParseTokens(env)
	if err != nil {
		return nil, usageError("%s: %v", consoleTokensEnv, err)
	}
	all := append(fromFile, fromEnv...)
	names := map[string]bool{}
	for _, t := range all {
		if names[t.Name] {
			return nil, usageError("token %s is in both --console-tokens and %s", t.Name, consoleTokensEnv)
		}
		names[t.Name] = true
	}
	return all, nil
}
