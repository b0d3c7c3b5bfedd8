// Package sinknet holds what the sinks share about the network: telling a
// broker that cannot be reached from one that refused a message, and
// client TLS configurations from PEM files.
package sinknet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// IsNetworkError reports whether err means the broker could not be reached
// or the connection broke: dial and connection failures, I/O timeouts, a
// deadline, a failed TLS handshake.
func IsNetworkError(err error) bool {
	for _, target := range []error{
		context.DeadlineExceeded,
		io.EOF,
		io.ErrUnexpectedEOF,
		net.ErrClosed,
		syscall.ECONNREFUSED,
		syscall.ECONNRESET,
		syscall.ECONNABORTED,
		syscall.EPIPE,
		syscall.ETIMEDOUT,
		syscall.EHOSTUNREACH,
		syscall.ENETUNREACH,
		syscall.ENETDOWN,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var (
		netErr     net.Error
		opErr      *net.OpError
		dnsErr     *net.DNSError
		recordErr  tls.RecordHeaderError
		alertErr   tls.AlertError
		verifyErr  *tls.CertificateVerificationError
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		invalidErr x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &opErr), errors.As(err, &dnsErr):
		return true
	case errors.As(err, &netErr) && netErr.Timeout():
		return true
	case errors.As(err, &recordErr), errors.As(err, &alertErr), errors.As(err, &verifyErr),
		errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalidErr):
		return true
	}
	return false
}

// LoadTLS builds a client TLS configuration from PEM files; sink names the
// sink in its errors ("kafka: read TLS CA file: ...").
//
// caFile, when set, replaces the system roots with the certificates it
// holds. certFile and keyFile, both set or both empty, give the client
// certificate for mutual TLS. insecureSkipVerify disables the verification
// of the server's certificate: for tests only. With every argument empty it
// returns a configuration that verifies the server against the system
// roots. The minimum version is TLS 1.2.
func LoadTLS(sink, caFile, certFile, keyFile string, insecureSkipVerify bool) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: insecureSkipVerify, //nolint:gosec // explicit opt-in, documented as test-only
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%s: read TLS CA file: %w", sink, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: TLS CA file %s holds no PEM certificate", sink, caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: load TLS client certificate: %w", sink, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, fmt.Errorf("%s: a TLS client certificate needs both a certificate file and a key file", sink)
	}
	return cfg, nil
}
