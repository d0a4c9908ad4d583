package httpserver

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

// testCA is a throwaway certificate authority that signs certificates for 127.0.0.1.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key named cn, for 127.0.0.1 and client use.
func (ca *testCA) issue(t *testing.T, cn string, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// writeAt writes data to path and sets its modification time to mod, so the test does
// not depend on the file system's timestamp granularity.
func writeAt(t *testing.T, path string, data []byte, mod time.Time) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mod, mod); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log sink the reloader writes to under its own lock and the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestTLSConfigValidate(t *testing.T) {
	both := "set both to serve TLS, or neither for plain HTTP"
	for _, tc := range []struct {
		name string
		cfg  TLSConfig
		want []string // substrings of the error; none: valid
	}{
		{"neither", TLSConfig{}, nil},
		{"both", TLSConfig{CertFile: "c.pem", KeyFile: "k.pem"}, nil},
		{"mutual", TLSConfig{CertFile: "c.pem", KeyFile: "k.pem", ClientCAFile: "ca.pem"}, nil},
		{"cert only", TLSConfig{CertFile: "c.pem"}, []string{"PULSE_TLS_CERT_FILE and PULSE_TLS_KEY_FILE: " + both}},
		{"key only", TLSConfig{KeyFile: "k.pem"}, []string{"PULSE_TLS_CERT_FILE and PULSE_TLS_KEY_FILE: " + both}},
		{"client CA alone", TLSConfig{ClientCAFile: "ca.pem"},
			[]string{"PULSE_TLS_CLIENT_CA_FILE: needs PULSE_TLS_CERT_FILE and PULSE_TLS_KEY_FILE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestCertReloaderServesTheFilesAsTheyChange(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca := newTestCA(t, "reload CA")
	base := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	certA, keyA := ca.issue(t, "pair-a", 2)
	writeAt(t, certFile, certA, base)
	writeAt(t, keyFile, keyA, base)

	var log syncBuffer
	clock := base
	r := newCertReloader(certFile, keyFile, slog.New(slog.NewTextHandler(&log, nil)))
	r.now = func() time.Time { return clock }
	var loaded []string
	r.loaded = func(c *tls.Certificate) { loaded = append(loaded, c.Leaf.Subject.CommonName) }
	if err := r.load(); err != nil {
		t.Fatal(err)
	}
	served := func() string {
		t.Helper()
		c, err := r.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatalf("GetCertificate: %v", err)
		}
		return c.Leaf.Subject.CommonName
	}
	if got := served(); got != "pair-a" {
		t.Fatalf("served %q, want pair-a", got)
	}

	// A new pair is not looked for until a second has passed since the last look.
	certB, keyB := ca.issue(t, "pair-b", 3)
	writeAt(t, certFile, certB, base.Add(10*time.Second))
	writeAt(t, keyFile, keyB, base.Add(10*time.Second))
	clock = base.Add(999 * time.Millisecond)
	if got := served(); got != "pair-a" {
		t.Fatalf("before the check interval: served %q, want pair-a", got)
	}
	clock = base.Add(time.Second)
	if got := served(); got != "pair-b" {
		t.Fatalf("after the check interval: served %q, want pair-b", got)
	}

	// A certificate that does not parse keeps the previous pair, and is logged once.
	writeAt(t, certFile, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"), base.Add(20*time.Second))
	clock = clock.Add(time.Second)
	if got := served(); got != "pair-b" {
		t.Fatalf("after a broken certificate: served %q, want pair-b", got)
	}
	clock = clock.Add(time.Second)
	served()
	if n := strings.Count(log.String(), "do not load"); n != 1 {
		t.Fatalf("broken certificate logged %d times, want once; log:\n%s", n, log.String())
	}

	// Half a renewal (the new certificate beside the old key) keeps the previous pair too.
	certC, keyC := ca.issue(t, "pair-c", 4)
	writeAt(t, certFile, certC, base.Add(30*time.Second))
	clock = clock.Add(time.Second)
	if got := served(); got != "pair-b" {
		t.Fatalf("with a key that does not match: served %q, want pair-b", got)
	}
	if !strings.Contains(log.String(), "private key does not match public key") {
		t.Fatalf("log does not name the mismatch:\n%s", log.String())
	}

	// A missing file keeps the previous pair; the renewal completing is picked up.
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Second)
	if got := served(); got != "pair-b" {
		t.Fatalf("with the key missing: served %q, want pair-b", got)
	}
	writeAt(t, keyFile, keyC, base.Add(31*time.Second))
	clock = clock.Add(time.Second)
	if got := served(); got != "pair-c" {
		t.Fatalf("after the renewal completed: served %q, want pair-c", got)
	}
	if want := []string{"pair-a", "pair-b", "pair-c"}; strings.Join(loaded, ",") != strings.Join(want, ",") {
		t.Fatalf("pairs put in service %q, want %q", loaded, want)
	}
}

func TestCertReloaderRefusesABadPairAtStart(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	r := newCertReloader(certFile, keyFile, slog.New(slog.NewTextHandler(io.Discard, nil)))
	err := r.load()
	if err == nil || !strings.Contains(err.Error(), "PULSE_TLS_CERT_FILE") || !strings.Contains(err.Error(), "PULSE_TLS_KEY_FILE") {
		t.Fatalf("load() of missing files = %v, want an error naming both variables", err)
	}
	ca := newTestCA(t, "start CA")
	certA, _ := ca.issue(t, "a", 2)
	_, keyB := ca.issue(t, "b", 3)
	writeAt(t, certFile, certA, time.Now())
	writeAt(t, keyFile, keyB, time.Now())
	if err := r.load(); err == nil || !strings.Contains(err.Error(), "private key does not match public key") {
		t.Fatalf("load() of a mismatched pair = %v, want the mismatch", err)
	}
}

// startTLSServer runs a Server with env's settings on a free port and returns its address.
func startTLSServer(t *testing.T, env map[string]string) string {
	t.Helper()
	env["PULSE_HTTP_ADDR"] = "127.0.0.1:0"
	e := config.NewEnv(config.MapLookup(env))
	cfg := ConfigFromEnv(e, "127.0.0.1:0")
	e.Load(TLSVars(&cfg.TLS)...)
	if err := errors.Join(e.Err(), cfg.TLS.Validate()); err != nil {
		t.Fatal(err)
	}
	s := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s.Addr().String()
}

func httpsClient(roots *x509.CertPool, mod func(*tls.Config)) *http.Client {
	tc := &tls.Config{RootCAs: roots}
	if mod != nil {
		mod(tc)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: tc}}
}

func TestServerSpeaksOnlyTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "server CA")
	certPEM, keyPEM := ca.issue(t, "127.0.0.1", 2)
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeAt(t, certFile, certPEM, time.Now())
	writeAt(t, keyFile, keyPEM, time.Now())
	addr := startTLSServer(t, map[string]string{"PULSE_TLS_CERT_FILE": certFile, "PULSE_TLS_KEY_FILE": keyFile})
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)

	res, err := httpsClient(roots, nil).Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("https /healthz: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"status":"ok"}` {
		t.Fatalf("https /healthz = %d %s, want 200 {\"status\":\"ok\"}", res.StatusCode, body)
	}
	if res.TLS == nil || res.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("https /healthz connection state %+v, want TLS 1.2 or later", res.TLS)
	}
	if got := res.Header.Get("Strict-Transport-Security"); got != hstsValue {
		t.Errorf("https /healthz Strict-Transport-Security = %q, want %q", got, hstsValue)
	}
	if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("https /healthz X-Content-Type-Options = %q, want nosniff", got)
	}

	// Plain HTTP on the TLS port: net/http's 400, and nothing of the API.
	res, err = (&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}).Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("plain http /healthz: %v", err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTP request to an HTTPS server") {
		t.Fatalf("plain http /healthz = %d %q, want 400 naming the HTTPS server", res.StatusCode, body)
	}

	// TLS 1.1 and older are refused in the handshake.
	_, err = httpsClient(roots, func(c *tls.Config) { c.MinVersion, c.MaxVersion = tls.VersionTLS10, tls.VersionTLS11 }).Get("https://" + addr + "/healthz")
	if err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("TLS 1.1 client: err = %v, want a protocol version alert", err)
	}

	// A client that does not trust the CA fails the handshake.
	_, err = httpsClient(x509.NewCertPool(), nil).Get("https://" + addr + "/healthz")
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); !ok {
		t.Fatalf("client without the CA: err = %v, want a certificate verification error", err)
	}
}

func TestServerAsksForClientCertificates(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := newTestCA(t, "server CA"), newTestCA(t, "client CA")
	certPEM, keyPEM := serverCA.issue(t, "127.0.0.1", 2)
	files := map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "clients.pem": clientCA.pem}
	for name, data := range files {
		writeAt(t, filepath.Join(dir, name), data, time.Now())
	}
	addr := startTLSServer(t, map[string]string{
		"PULSE_TLS_CERT_FILE":      filepath.Join(dir, "tls.crt"),
		"PULSE_TLS_KEY_FILE":       filepath.Join(dir, "tls.key"),
		"PULSE_TLS_CLIENT_CA_FILE": filepath.Join(dir, "clients.pem"),
	})
	roots := x509.NewCertPool()
	roots.AddCert(serverCA.cert)

	if _, err := httpsClient(roots, nil).Get("https://" + addr + "/healthz"); err == nil {
		t.Fatal("a client without a certificate was served, want the handshake refused")
	}
	// A certificate from another CA is refused as well.
	otherPEM, otherKey := serverCA.issue(t, "stranger", 3)
	stranger, err := tls.X509KeyPair(otherPEM, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := httpsClient(roots, func(c *tls.Config) { c.Certificates = []tls.Certificate{stranger} }).Get("https://" + addr + "/healthz"); err == nil {
		t.Fatal("a client certificate of another CA was served, want the handshake refused")
	}
	clientPEM, clientKey := clientCA.issue(t, "producer", 4)
	client, err := tls.X509KeyPair(clientPEM, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	res, err := httpsClient(roots, func(c *tls.Config) { c.Certificates = []tls.Certificate{client} }).Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("client with a certificate of the client CA: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("client with a certificate of the client CA: %d, want 200", res.StatusCode)
	}
}
