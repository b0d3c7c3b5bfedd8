package redisstream_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/redisstream"
)

// testPKI holds the PEM files of a CA, a server certificate for 127.0.0.1
// and a client certificate, all signed by the CA.
type testPKI struct {
	caCert, serverCert, serverKey, clientCert, clientKey string
}

// newPKI writes a fresh testPKI to a temporary directory.
func newPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "outboxrelay test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		k := newKey()
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	serverDER, serverKey := leaf(2, "redis", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	clientDER, clientKey := leaf(3, "relay", x509.ExtKeyUsageClientAuth, nil)
	return testPKI{
		caCert:     write("ca.pem", "CERTIFICATE", caDER),
		serverCert: write("server.pem", "CERTIFICATE", serverDER),
		serverKey:  write("server-key.pem", "PRIVATE KEY", keyDER(serverKey)),
		clientCert: write("client.pem", "CERTIFICATE", clientDER),
		clientKey:  write("client-key.pem", "PRIVATE KEY", keyDER(clientKey)),
	}
}

// TLS: a rediss:// URL with the CA verifies the server; mutual TLS with a
// client certificate; a server the CA did not sign, or a missing client
// certificate, is unavailable.
func TestTLS(t *testing.T) {
	t.Parallel()
	sharedRedis(t)
	pki := newPKI(t)
	msgs := []outbox.Message{newMsg("tls", "k", "over TLS")}
	loadTLS := func(ca, cert, key string) redisstream.Config {
		cfg, err := redisstream.LoadTLS(ca, cert, key, false)
		if err != nil {
			t.Fatalf("LoadTLS: %v", err)
		}
		return redisstream.Config{TLS: cfg}
	}

	server := startPrivateTLS(t, pki, false)
	cfg := loadTLS(pki.caCert, "", "")
	cfg.URL = "rediss://" + server.Addr
	if err := newPublisher(t, cfg).Publish(testCtx(t, publisherstestTimeout), msgs); err != nil {
		t.Errorf("Publish over TLS with the CA: %v", err)
	}
	cfg.URL = "redis://" + server.Addr // Config.TLS alone turns TLS on
	if err := newPublisher(t, cfg).Publish(testCtx(t, publisherstestTimeout), msgs); err != nil {
		t.Errorf("Publish over TLS, redis:// URL and Config.TLS: %v", err)
	}
	unverified := newPublisher(t, redisstream.Config{URL: "rediss://" + server.Addr}) // system roots
	var verifyErr *tls.CertificateVerificationError
	if err := unverified.Publish(testCtx(t, publisherstestTimeout), msgs); publishers.ClassOf(err).String() != "unavailable" || !errors.As(err, &verifyErr) {
		t.Errorf("Publish to a server no known CA signed: %s (%v), want unavailable wrapping the verification failure", publishers.ClassOf(err).String(), err)
	}

	mutual := startPrivateTLS(t, pki, true)
	cfg = loadTLS(pki.caCert, pki.clientCert, pki.clientKey)
	cfg.URL = "rediss://" + mutual.Addr
	if err := newPublisher(t, cfg).Publish(testCtx(t, publisherstestTimeout), msgs); err != nil {
		t.Errorf("Publish with a client certificate: %v", err)
	}
	cfg = loadTLS(pki.caCert, "", "")
	cfg.URL = "rediss://" + mutual.Addr
	if err := newPublisher(t, cfg).Publish(testCtx(t, publisherstestTimeout), msgs); publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("Publish without the client certificate a server requires: %s (%v), want unavailable", publishers.ClassOf(err).String(), err)
	}

	if _, err := redisstream.LoadTLS(pki.caCert, pki.clientCert, "", false); err == nil {
		t.Error("LoadTLS with a certificate but no key succeeded")
	}
	if _, err := redisstream.LoadTLS(pki.serverKey, "", "", false); err == nil {
		t.Error("LoadTLS with a CA file holding no certificate succeeded")
	}
}
