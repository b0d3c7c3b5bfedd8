package sinknet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestIsNetworkError(t *testing.T) {
	// A real refused connection: nothing listens on the port of a closed
	// listener.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, refused := net.Dial("tcp", addr)
	for _, c := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{context.DeadlineExceeded, true},
		{tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, true},
		{errors.New("topic authorization failed"), false},
		{context.Canceled, false},
	} {
		if got := IsNetworkError(c.err); got != c.want {
			t.Errorf("IsNetworkError(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestLoadTLS(t *testing.T) {
	cfg, err := LoadTLS("x", "", "", "", false)
	if err != nil || cfg.MinVersion != tls.VersionTLS12 || cfg.RootCAs != nil || cfg.InsecureSkipVerify {
		t.Fatalf("LoadTLS with no files = %+v, %v; want TLS 1.2 against the system roots", cfg, err)
	}
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ca, cert, key string
		want          string
	}{
		{filepath.Join(dir, "missing.pem"), "", "", "nats: read TLS CA file"},
		{notPEM, "", "", "holds no PEM certificate"},
		{"", "cert.pem", "", "needs both a certificate file and a key file"},
	} {
		if _, err := LoadTLS("nats", c.ca, c.cert, c.key, false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LoadTLS(%q, %q, %q) error = %v; want one saying %q", c.ca, c.cert, c.key, err, c.want)
		}
	}
}
