package tests

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
)

// backendCerts are the throwaway PEM files of one backend test: a CA, a certificate
// for the server at 127.0.0.1 (and localhost) signed by it, and a client certificate
// signed by it, for servers that ask for one. The server's file is also written as one
// PEM holding its key and chain, the keystore Kafka and Cassandra read.
type backendCerts struct {
	ca                    *tlsCA
	caFile                string
	serverCert, serverKey string
	serverKeystore        string // key, then certificate
	clientCert, clientKey string
}

func newBackendCerts(t *testing.T, dir string) *backendCerts {
	t.Helper()
	c := &backendCerts{
		ca:             newTLSCA(t, "pulse backend test CA"),
		caFile:         filepath.Join(dir, "ca.pem"),
		serverCert:     filepath.Join(dir, "server.crt"),
		serverKey:      filepath.Join(dir, "server.key"),
		serverKeystore: filepath.Join(dir, "server.pem"),
		clientCert:     filepath.Join(dir, "client.crt"),
		clientKey:      filepath.Join(dir, "client.key"),
	}
	writePEM(t, c.caFile, &pem.Block{Type: "CERTIFICATE", Bytes: c.ca.cert.Raw})
	cert, key := c.ca.issue(t, "127.0.0.1", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	writePEM(t, c.serverCert, cert)
	writePEM(t, c.serverKey, key)
	writePEM(t, c.serverKeystore, key, cert)
	cert, key = c.ca.issue(t, "pulse", x509.ExtKeyUsageClientAuth)
	writePEM(t, c.clientCert, cert)
	writePEM(t, c.clientKey, key)
	return c
}

// issue makes a certificate for 127.0.0.1 and localhost with the given uses, signed
// by ca, and returns it and its PKCS#8 key as PEM blocks.
func (ca *tlsCA) issue(t *testing.T, cn string, usage ...x509.ExtKeyUsage) (cert, key *pem.Block) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &k.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return &pem.Block{Type: "CERTIFICATE", Bytes: der}, &pem.Block{Type: "PRIVATE KEY", Bytes: kder}
}

func writePEM(t *testing.T, path string, blocks ...*pem.Block) {
	t.Helper()
	var b []byte
	for _, blk := range blocks {
		b = append(b, pem.EncodeToMemory(blk)...)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
