package webhook

import (
	"crypto/tls"

	"github.com/outboxrelay/outboxrelay/publishers/internal/sinknet"
)

// LoadTLS builds a client TLS configuration from PEM files, for Config.TLS.
//
// caFile, when set, replaces the system roots with the certificates it
// holds. certFile and keyFile, both set or both empty, give the client
// certificate for mutual TLS. insecureSkipVerify disables the verification
// of the receiver's certificate: for tests only. With every argument empty it
// returns a configuration that verifies the receiver against the system roots.
// The minimum version is TLS 1.2.
func LoadTLS(caFile, certFile, keyFile string, insecureSkipVerify bool) (*tls.Config, error) {
	return sinknet.LoadTLS("webhook", caFile, certFile, keyFile, insecureSkipVerify)
}
