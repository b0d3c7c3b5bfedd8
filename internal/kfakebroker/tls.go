package kfakebroker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles is a throw-away PKI for a TLS broker, made by GenerateTLS.
type TLSFiles struct {
	// Server is the broker's configuration, for Options.TLS: a certificate
	// for 127.0.0.1 and localhost, and client certificates verified
	// against the CA when a client presents one.
	Server *tls.Config
	// CAFile is the PEM file of the CA that signed every certificate.
	CAFile string
	// CertFile and KeyFile are a client certificate and its key, in PEM,
	// for mutual TLS.
	CertFile, KeyFile string
}

// GenerateTLS creates a CA, a server certificate and a client certificate,
// valid for one day, and writes the client's PEM files into dir.
func GenerateTLS(dir string) (*TLSFiles, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("kfakebroker: generate CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kfakebroker test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("kfakebroker: create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("kfakebroker: parse CA certificate: %w", err)
	}

	issue := func(serial int64, name string, usage x509.ExtKeyUsage) (tls.Certificate, []byte, []byte, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return tls.Certificate{}, nil, nil, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return tls.Certificate{}, nil, nil, err
		}
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		return cert, certPEM, keyPEM, err
	}
	serverCert, _, _, err := issue(2, "kfakebroker", x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, fmt.Errorf("kfakebroker: issue server certificate: %w", err)
	}
	_, clientPEM, clientKeyPEM, err := issue(3, "kfakebroker client", x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, fmt.Errorf("kfakebroker: issue client certificate: %w", err)
	}

	files := &TLSFiles{
		CAFile:   filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "client.pem"),
		KeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	for path, data := range map[string][]byte{
		files.CAFile:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		files.CertFile: clientPEM,
		files.KeyFile:  clientKeyPEM,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("kfakebroker: write %s: %w", path, err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	files.Server = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{serverCert},
		ClientCAs:    pool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
	}
	return files, nil
}
