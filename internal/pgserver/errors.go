package pgserver

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrNoBinaries reports that no PostgreSQL server installation (initdb
	// and postgres) was found.
	ErrNoBinaries = errors.New("pgserver: PostgreSQL server binaries (initdb, postgres) not found")
	// ErrClosed is returned by Restart on a closed Server.
	ErrClosed = errors.New("pgserver: server is closed")

	// errPortTaken reports that the port was not free; Start then tries
	// another when it picked the port itself.
	errPortTaken = errors.New("port in use")
)

// logLines is how many lines of output an error quotes.
const logLines = 30

// withOutput appends the tail of a program's output to an error message.
func withOutput(err error, what, output string) error {
	output = tail(output, logLines)
	if output == "" {
		return err
	}
	return fmt.Errorf("%w\n--- %s (last %d lines) ---\n%s", err, what, logLines, output)
}

// tail returns the last n lines of s, without a trailing newline.
func tail(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	if n <= 0 || s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
