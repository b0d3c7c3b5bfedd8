package store

import "strings"

// StripComments drops the lines of a statement file that are only a
// comment: each store keeps its statements as .sql files whose
// explanations need not travel with every statement.
func StripComments(q string) string {
	var b strings.Builder
	for line := range strings.Lines(q) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	return strings.TrimSpace(b.String())
}
