package rabbitmq

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// LoadTLS builds a client TLS configuration from PEM files, for Config.TLS.
//
// caFile, when set, replaces the system roots with the certificates it
// holds. certFile and keyFile, both set or both empty, give the client
// certificate for mutual TLS. insecureSkipVerify disables the verification
// of the broker's certificate: for tests only. With every argument empty it
// returns a configuration that verifies the broker against the system roots.
// The minimum version is TLS 1.2.
func LoadTLS(caFile, certFile, keyFile string, insecureSkipVerify bool) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: insecureSkipVerify, //nolint:gosec // explicit opt-in, documented as test-only
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("rabbitmq: read TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("rabbitmq: TLS CA file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("rabbitmq: load TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("rabbitmq: a TLS client certificate needs both a certificate file and a key file")
	}
	return cfg, nil
}
