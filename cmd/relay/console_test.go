package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
)

func TestConsoleUsageErrors(t *testing.T) {
	t.Parallel()
	url := "postgres://postgres@127.0.0.1:1/postgres"
	bad := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(bad, []byte("ops:admin:0123456789abcdef-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"console", "--database-url", url, "--listen", "0.0.0.0:0"}, `--listen "0.0.0.0:0" is not a loopback address`},
		{nil, []string{"console", "--database-url", url, "--listen", ":8089"}, `--listen ":8089" is not a loopback address`},
		{nil, []string{"console", "--database-url", url, "--listen", "8089"}, `"8089" is not host:port`},
		{nil, []string{"console", "--database-url", url, "--console-tokens", bad}, `role "admin" is neither read nor write`},
		{map[string]string{"OUTBOX_CONSOLE_TOKENS": "ops:read:short"}, []string{"console", "--database-url", url}, "OUTBOX_CONSOLE_TOKENS: line 1: token ops: the secret is shorter"},
		// relay run's OUTBOX_LISTEN is not the console's.
		{map[string]string{"OUTBOX_LISTEN": "nope"}, []string{"console", "--listen", "0.0.0.0:1"}, "--database-url (OUTBOX_DATABASE_URL) is required"},
	} {
		code, _, stderr := invoke(context.Background(), c.env, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "0123456789abcdef") {
			t.Errorf("%v: exit %d, want 2 and %q:\n%s", c.args, code, c.want, stderr)
		}
	}
}

// relay console serves the API with the tokens of OUTBOX_CONSOLE_TOKENS
// until its context ends, and then exits 0.
func TestConsoleServes(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)
	b.put(t, "orders", 2, "status = 'failed', last_error = 'boom'")
	env := map[string]string{"OUTBOX_CONSOLE_TOKENS": "ops:read:ops-secret-0123456789"}
	for k, v := range b.env {
		env[k] = v
	}
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var stdout, stderr syncbuf.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"console", "--listen", "127.0.0.1:0"}, func(k string) string { return env[k] }, &stdout, &stderr)
	}()
	addrRe := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`)
	var addr string
	for deadline := time.Now().Add(time.Minute); addr == ""; {
		if m := addrRe.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("relay console did not say where it serves:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the log for the line
	}
	get := func(token string) (int, []byte) {
		req, _ := http.NewRequestWithContext(b.ctx, "GET", "http://"+addr+"/api/groups", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	if code, body := get(""); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d %s", code, body)
	}
	code, body := get("ops-secret-0123456789")
	var groups struct {
		Groups []struct{ Count int64 } `json:"groups"`
	}
	if err := json.Unmarshal(body, &groups); code != http.StatusOK || err != nil || len(groups.Groups) != 1 || groups.Groups[0].Count != 2 {
		t.Errorf("groups: %d %s", code, body)
	}
	cancel()
	if code := <-exited; code != 0 {
		t.Errorf("exit %d:\n%s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "ops-secret") {
		t.Errorf("the log holds a secret:\n%s", stderr.String())
	}
}
