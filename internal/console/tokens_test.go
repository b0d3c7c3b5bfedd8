package console

import (
	"strings"
	"testing"
)

func TestParseTokens(t *testing.T) {
	t.Parallel()
	ts, err := ParseTokens("# who may use the console\n\nalice:write:aaaaaaaaaaaaaaaa1\n  bob:read:bbbbbbbbbbbbbbbb2 carol:read:cc:cccccccccccccc3\n")
	if err != nil {
		t.Fatal(err)
	}
	for secret, want := range map[string]string{
		"aaaaaaaaaaaaaaaa1": "alice write", "bbbbbbbbbbbbbbbb2": "bob read", "cc:cccccccccccccc3": "carol read",
		"aaaaaaaaaaaaaaaa": "", "": "",
	} {
		tok, ok := ts.find(secret)
		if got := strings.TrimSpace(tok.Name + " " + string(tok.Role)); ok != (want != "") || got != want {
			t.Errorf("find(%q) = %q, %v; want %q", secret, got, ok, want)
		}
	}
	const secret = "s3cr3t-s3cr3t-s3cr3t"
	for text, want := range map[string]string{
		"alice:" + secret:                           "line 1: a token is name:role:secret",
		"alice:admin:" + secret:                     `role "admin" is neither read nor write`,
		"alice:read:short":                          "shorter than 16",
		"al/ice:read:" + secret:                     `token name "al/ice"`,
		"a:read:" + secret + "\nb:write:" + secret:  "line 2: token b has the secret of another token",
		"a:read:" + secret + "1\na:write:" + secret: "line 2: token a is named twice",
	} {
		_, err := ParseTokens(text)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), secret) {
			t.Errorf("%q: %v, want %q without the secret", text, err, want)
		}
	}
}
