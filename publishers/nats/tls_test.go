package natssink_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
)

// With LoadTLS's configuration the sink verifies the server against the
// CA file and publishes over TLS; without the CA the handshake fails and
// the sink is unavailable.
func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caFile, certFile, keyFile := writeCertificates(t, dir)
	s := startServer(t, "-js", "--tls", "--tlscert", certFile, "--tlskey", keyFile)

	tlsCfg, err := natssink.LoadTLS(caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	p := newPublisher(t, natssink.Config{URLs: []string{s.URL}, TLS: tlsCfg})
	if err := p.Probe(testCtx(t, 10*time.Second)); err != nil {
		t.Fatalf("Probe over TLS: %v", err)
	}
	err = p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg(unboundSubject(), "k", "x")})
	if publishers.ClassOf(perMessage(t, err, 1)[0]).String() != "permanent" {
		t.Errorf("Publish over TLS to a subject without a stream = %v, want the server's answer (permanent)", err)
	}

	systemRoots, err := natssink.LoadTLS("", "", "")
	if err != nil {
		t.Fatal(err)
	}
	untrusting := newPublisher(t, natssink.Config{URLs: []string{s.URL}, TLS: systemRoots})
	if err := untrusting.Probe(testCtx(t, 10*time.Second)); publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("Probe of a server signed by an unknown CA = %v (%s), want unavailable", err, publishers.ClassOf(err).String())
	}

	if _, err := natssink.LoadTLS(caFile, certFile, ""); err == nil {
		t.Error("LoadTLS with a certificate and no key succeeded")
	}
	if _, err := natssink.LoadTLS(filepath.Join(dir, "missing.pem"), "", ""); err == nil {
		t.Error("LoadTLS with a missing CA file succeeded")
	}
}

// writeCertificates writes a CA and a server certificate for 127.0.0.1
// signed by it, as PEM files in dir.
func writeCertificates(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "outboxrelay test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", leafDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}
