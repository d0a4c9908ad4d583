package trust

import (
	"crypto/tls"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigTrustsTheCAFile(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	// httptest's certificate is self-signed: it is its own CA.
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	get := func(tc *tls.Config) error {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		res, err := c.Get(srv.URL)
		if err == nil {
			res.Body.Close()
		}
		return err
	}

	system, err := Config("")
	if err != nil {
		t.Fatal(err)
	}
	if err := get(system); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("system roots alone: err = %v, want the server's certificate refused", err)
	}
	withCA, err := Config(caFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(withCA); err != nil {
		t.Fatalf("with the CA file: %v", err)
	}
	if withCA.MinVersion != tls.VersionTLS12 {
		t.Fatalf("MinVersion = %x, want TLS 1.2", withCA.MinVersion)
	}
}

func TestConfigRefusesABadCAFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := Config(filepath.Join(dir, "missing.pem")); err == nil || !strings.Contains(err.Error(), "reading the CA file") {
		t.Fatalf("missing file: err = %v, want a read error", err)
	}
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Config(empty); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("file without a certificate: err = %v, want no PEM certificate", err)
	}
}
