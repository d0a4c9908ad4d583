package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeSelfSigned writes a self-signed certificate and its key as PEM files.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pulse test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestClientTLSVarsLoad(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
	var c ClientTLS
	env := NewEnv(MapLookup(map[string]string{
		"PULSE_TEST_X_TLS_CA_FILE": cert, "PULSE_TEST_X_TLS_CERT_FILE": cert, "PULSE_TEST_X_TLS_KEY_FILE": key,
	}))
	env.Load(ClientTLSVars(&c, "PULSE_TEST_X_", "X")...)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	if !c.On() || c.Enabled {
		t.Fatalf("%+v: want TLS on through its files alone", c)
	}
	tc, err := c.Load("PULSE_TEST_X_")
	if err != nil {
		t.Fatal(err)
	}
	if tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.MinVersion == 0 || tc.InsecureSkipVerify {
		t.Fatalf("tls.Config = %+v: want the CA as the only roots, one client certificate, a minimum version, verification on", tc)
	}
	if tc, err := (ClientTLS{}).Load("PULSE_TEST_X_"); tc != nil || err != nil {
		t.Fatalf("no TLS: Load() = %v, %v; want nil, nil", tc, err)
	}
	if tc, err := (ClientTLS{Enabled: true}).Load("PULSE_TEST_X_"); err != nil || tc == nil || tc.RootCAs != nil {
		t.Fatalf("TLS without files: Load() = %+v, %v; want the system's roots", tc, err)
	}
}

func TestClientTLSErrorsNameTheVariable(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		c    ClientTLS
		want string
	}{
		{ClientTLS{CertFile: cert}, "PULSE_TEST_X_TLS_CERT_FILE and PULSE_TEST_X_TLS_KEY_FILE: set both"},
		{ClientTLS{KeyFile: key}, "PULSE_TEST_X_TLS_CERT_FILE and PULSE_TEST_X_TLS_KEY_FILE: set both"},
		{ClientTLS{CAFile: filepath.Join(dir, "missing.pem")}, "PULSE_TEST_X_TLS_CA_FILE: open " + dir},
		{ClientTLS{CAFile: notPEM}, "PULSE_TEST_X_TLS_CA_FILE=" + notPEM + ": no PEM certificate"},
		{ClientTLS{CertFile: cert, KeyFile: cert}, "PULSE_TEST_X_TLS_CERT_FILE=" + cert + " and PULSE_TEST_X_TLS_KEY_FILE=" + cert + ": "},
	} {
		_, err := tt.c.Load("PULSE_TEST_X_")
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%+v: Load() error = %v, want it to start %q", tt.c, err, tt.want)
		}
	}
}

func TestSecret(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte("s3cret pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := Secret("inline", "", "PULSE_TEST_PW", "PULSE_TEST_PW_FILE"); got != "inline" || err != nil {
		t.Errorf("value only: %q, %v", got, err)
	}
	if got, err := Secret("", file, "PULSE_TEST_PW", "PULSE_TEST_PW_FILE"); got != "s3cret pass" || err != nil {
		t.Errorf("file only: %q, %v; want the file without its line end", got, err)
	}
	for _, tt := range []struct{ value, file, want string }{
		{"inline", file, "PULSE_TEST_PW and PULSE_TEST_PW_FILE: set one, not both"},
		{"", empty, "PULSE_TEST_PW_FILE=" + empty + ": the file is empty"},
		{"", filepath.Join(dir, "missing"), "PULSE_TEST_PW_FILE: open "},
	} {
		_, err := Secret(tt.value, tt.file, "PULSE_TEST_PW", "PULSE_TEST_PW_FILE")
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Secret(%q, %q) error = %v, want it to start %q and show no secret", tt.value, tt.file, err, tt.want)
		}
	}
}
