package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"regexp"
	"strings"
)

// Role is what a token may do.
type Role string

// The roles.
const (
	// Read reads status, failed rows (without payloads), groups and
	// the audit trail.
	Read Role = "read"
	// Write also retries, purges and replays, and reads payloads.
	Write Role = "write"
)

// Token is one bearer token. Its secret is kept only as a SHA-256 hash.
type Token struct {
	// Name identifies the token in the audit trail (console:<Name>) and
	// the log; never the secret.
	Name string
	Role Role
	hash [sha256.Size]byte
}

// Tokens are the tokens the console accepts; none means loopback only,
// without authentication.
type Tokens []Token

// minSecret is the shortest secret accepted.
const minSecret = 16

var nameRe = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)

// ParseTokens reads tokens from text: name:role:secret entries separated
// by spaces or newlines, role read or write, the secret at least 16
// characters. Blank lines and lines starting with # are skipped. Errors
// name the entry by its line and name, never by its secret.
func ParseTokens(text string) (Tokens, error) {
	var out Tokens
	names := map[string]bool{}
	hashes := map[[sha256.Size]byte]bool{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, entry := range strings.Fields(line) {
			name, rest, _ := strings.Cut(entry, ":")
			role, secret, ok := strings.Cut(rest, ":")
			switch {
			case !ok:
				return nil, fmt.Errorf("line %d: a token is name:role:secret", i+1)
			case !nameRe.MatchString(name):
				return nil, fmt.Errorf("line %d: token name %q: use 1-64 letters, digits and ._@-", i+1, name)
			case Role(role) != Read && Role(role) != Write:
				return nil, fmt.Errorf("line %d: token %s: role %q is neither read nor write", i+1, name, role)
			case len(secret) < minSecret:
				return nil, fmt.Errorf("line %d: token %s: the secret is shorter than %d characters", i+1, name, minSecret)
			case names[name]:
				return nil, fmt.Errorf("line %d: token %s is named twice", i+1, name)
			}
			h := sha256.Sum256([]byte(secret))
			if hashes[h] {
				return nil, fmt.Errorf("line %d: token %s has the secret of another token", i+1, name)
			}
			names[name], hashes[h] = true, true
			out = append(out, Token{Name: name, Role: Role(role), hash: h})
		}
	}
	return out, nil
}

// find returns the token whose secret is secret. It compares the hashes
// in constant time, and compares every token, so that the time taken
// tells nothing of which one matched or how much of it.
func (ts Tokens) find(secret string) (Token, bool) {
	h := sha256.Sum256([]byte(secret))
	var found Token
	ok := false
	for _, t := range ts {
		if subtle.ConstantTimeCompare(h[:], t.hash[:]) == 1 {
			found, ok = t, true
		}
	}
	return found, ok
}
