package redisstream

import (
	"crypto/tls"

	"github.com/outboxrelay/outboxrelay/publishers/internal/sinknet"
)

// LoadTLS builds a client TLS configuration from PEM files, for Config.TLS.
//
// caFile, when set, replaces the system roots with the certificates it
// holds. certFile and keyFile, both set or both empty, give the client
// certificate for mutual TLS (Redis' tls-auth-clients). insecureSkipVerify
// disables the verification of the server's certificate: for tests only.
// With every argument empty it returns a configuration that verifies the
// server against the system roots. The minimum version is TLS 1.2.
func LoadTLS(caFile, certFile, keyFile string, insecureSkipVerify bool) (*tls.Config, error) {
	return sinknet.LoadTLS("redisstream", caFile, certFile, keyFile, insecureSkipVerify)
}
