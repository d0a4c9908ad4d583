package tests

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

// TLS on the HTTP edge (docs/design.md, Security): ingest and query with
// PULSE_TLS_CERT_FILE and PULSE_TLS_KEY_FILE speak only TLS, and serve a renewed
// certificate without a restart. The certificates are made here, by a throwaway CA.

// tlsCA is a throwaway certificate authority.
type tlsCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTLSCA(t *testing.T, name string) *tlsCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
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
	return &tlsCA{cert: cert, key: key}
}

// writeServerPair writes a certificate for 127.0.0.1 signed by ca, and its key, to
// certFile and keyFile. Each file is written beside its place and renamed onto it, as
// certificate tools replace files, so the service never reads half a file.
func (ca *tlsCA) writeServerPair(t *testing.T, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
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
	for path, block := range map[string]*pem.Block{
		certFile: {Type: "CERTIFICATE", Bytes: der},
		keyFile:  {Type: "PRIVATE KEY", Bytes: kder},
	} {
		tmp := path + ".new"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
}

// tlsClient trusts only the given CAs (none: the system's roots, which know no
// throwaway CA).
func tlsClient(cas ...*tlsCA) *http.Client {
	var roots *x509.CertPool
	if len(cas) > 0 {
		roots = x509.NewCertPool()
		for _, ca := range cas {
			roots.AddCert(ca.cert)
		}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		Proxy:             nil,
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: true, // every request makes a handshake: the one under test
	}}
}

// tlsDo sends one request with the key given and returns the status code and body; an
// error is the request's own failure (the handshake's, for these tests).
func tlsDo(c *http.Client, method, url, key string, body any) (int, string, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, "", err
		}
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, "", err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// startTLSService is startService for a service serving TLS: it waits until the
// service answers /healthz over https to client, and stops it with SIGTERM at cleanup.
func startTLSService(t *testing.T, name string, env map[string]string, client *http.Client) *harness.Service {
	t.Helper()
	port := harness.FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := &harness.Service{Name: name, URL: "https://" + addr, Out: &harness.SyncBuffer{}, Done: make(chan struct{})}
	harness.ServiceAt.Store(addr, name)
	s.Cmd = exec.Command(harness.Binary(name))
	s.Cmd.Env = append(os.Environ(), "PULSE_HTTP_ADDR="+addr)
	for k, v := range env {
		s.Cmd.Env = append(s.Cmd.Env, k+"="+v)
	}
	s.Cmd.Stdout, s.Cmd.Stderr = s.Out, s.Out
	if err := s.Cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { s.Err = s.Cmd.Wait(); close(s.Done) }()
	t.Cleanup(func() { s.Stop(t) })
	harness.Eventually(t, 30*time.Second, func() string {
		select {
		case <-s.Done:
			t.Fatalf("%s exited before it answered (%v); output:\n%s", name, s.Err, s.Out)
		default:
		}
		code, body, err := tlsDo(client, http.MethodGet, s.URL+"/readyz", "", nil)
		if err != nil || code != http.StatusOK {
			return fmt.Sprintf("%s https /readyz = %d %s %v", name, code, body, err)
		}
		return ""
	})
	return s
}

func TestTLSIngestAndQuery(t *testing.T) {
	p := harness.NewTopics(t, 2)
	p.Start(t, "aggregator") // plain HTTP: it serves only probes and metrics
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca1 := newTLSCA(t, "pulse test CA 1")
	ca1.writeServerPair(t, certFile, keyFile)
	env := map[string]string{"PULSE_TLS_CERT_FILE": certFile, "PULSE_TLS_KEY_FILE": keyFile}
	for k, v := range p.Env {
		env[k] = v
	}
	trusting1 := tlsClient(ca1)
	ingest := startTLSService(t, "ingest", env, trusting1)
	query := startTLSService(t, "query", env, trusting1)

	// /healthz answers over TLS, on both.
	for _, s := range []*harness.Service{ingest, query} {
		code, body, err := tlsDo(trusting1, http.MethodGet, s.URL+"/healthz", "", nil)
		if err != nil || code != http.StatusOK || strings.TrimSpace(body) != `{"status":"ok"}` {
			t.Fatalf("%s https /healthz = %d %q %v, want 200 {\"status\":\"ok\"}", s.Name, code, body, err)
		}
	}

	// An https request with the CA: the producer posts, the reader counts.
	user := p.Run + "-tls-alice"
	code, body, err := tlsDo(trusting1, http.MethodPost, ingest.URL+"/v1/events", harness.TestKeys.Producer, map[string]any{
		"events": []map[string]any{{"eventId": p.Run + "-tls-1", "userId": user, "kind": "status", "status": "online", "deviceId": "phone"}},
	})
	if err != nil || code != http.StatusAccepted || !strings.Contains(body, `"accepted":1`) {
		t.Fatalf("https POST /v1/events = %d %s %v, want 202 accepted 1", code, body, err)
	}
	harness.Eventually(t, 10*time.Second, func() string {
		code, body, err := tlsDo(trusting1, http.MethodGet, query.URL+"/v1/online/count", harness.TestKeys.Reader, nil)
		if err != nil || code != http.StatusOK {
			return fmt.Sprintf("https GET /v1/online/count = %d %s %v", code, body, err)
		}
		var c struct {
			Total    uint64            `json:"total"`
			ByStatus map[string]uint64 `json:"byStatus"`
		}
		if err := json.Unmarshal([]byte(body), &c); err != nil {
			return fmt.Sprintf("https GET /v1/online/count: %v in %s", err, body)
		}
		if c.Total != 1 || c.ByStatus["online"] != 1 {
			return fmt.Sprintf("https GET /v1/online/count = %s, want total 1, online 1", body)
		}
		return ""
	})
	code, body, err = tlsDo(trusting1, http.MethodGet, query.URL+"/v1/users/"+user+"/status", harness.TestKeys.Reader, nil)
	if err != nil || code != http.StatusOK || !strings.Contains(body, `"status":"online"`) {
		t.Fatalf("https GET /v1/users/%s/status = %d %s %v, want 200 online", user, code, body, err)
	}

	// Plain HTTP on the same ports is refused: net/http's 400, never the API.
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	for _, r := range []struct {
		s        *harness.Service
		method   string
		path     string
		key      string
		body     any
		endpoint string
	}{
		{ingest, http.MethodPost, "/v1/events", harness.TestKeys.Producer, map[string]any{
			"events": []map[string]any{{"userId": user, "kind": "status", "status": "offline", "deviceId": "phone"}}}, "POST /v1/events"},
		{query, http.MethodGet, "/v1/online/count", harness.TestKeys.Reader, nil, "GET /v1/online/count"},
		{query, http.MethodGet, "/healthz", "", nil, "GET /healthz"},
	} {
		url := "http://" + strings.TrimPrefix(r.s.URL, "https://") + r.path
		code, body, err := tlsDo(plain, r.method, url, r.key, r.body)
		if err != nil || code != http.StatusBadRequest || !strings.Contains(body, "HTTP request to an HTTPS server") {
			t.Errorf("plain http %s on %s's TLS port = %d %q %v, want 400 \"Client sent an HTTP request to an HTTPS server\"",
				r.endpoint, r.s.Name, code, body, err)
		}
	}
	// The refused plain POST produced nothing: alice is still online.
	code, body, err = tlsDo(trusting1, http.MethodGet, query.URL+"/v1/users/"+user+"/status", harness.TestKeys.Reader, nil)
	if err != nil || code != http.StatusOK || !strings.Contains(body, `"status":"online"`) {
		t.Fatalf("after the plain POST: GET /v1/users/%s/status = %d %s %v, want 200 online", user, code, body, err)
	}

	// A client that does not trust the CA fails the handshake.
	for _, s := range []*harness.Service{ingest, query} {
		_, _, err := tlsDo(tlsClient(), http.MethodGet, s.URL+"/healthz", "", nil)
		if _, ok := errors.AsType[*tls.CertificateVerificationError](err); !ok {
			t.Errorf("%s: client without the CA: err = %v, want a certificate verification error", s.Name, err)
		}
	}

	// A new pair signed by another CA replaces the files: both services serve it
	// within a few seconds, without a restart.
	ca2 := newTLSCA(t, "pulse test CA 2")
	ca2.writeServerPair(t, certFile, keyFile)
	trusting2 := tlsClient(ca2)
	start := time.Now()
	harness.Eventually(t, 5*time.Second, func() string {
		for _, s := range []*harness.Service{ingest, query} {
			if code, body, err := tlsDo(trusting2, http.MethodGet, s.URL+"/healthz", "", nil); err != nil || code != http.StatusOK {
				return fmt.Sprintf("%s with only the new CA: %d %s %v", s.Name, code, body, err)
			}
		}
		return ""
	})
	t.Logf("the new certificate was served %v after the files were replaced", time.Since(start).Round(time.Millisecond))
	code, body, err = tlsDo(trusting2, http.MethodPost, ingest.URL+"/v1/events", harness.TestKeys.Producer, map[string]any{
		"events": []map[string]any{{"eventId": p.Run + "-tls-2", "userId": user, "kind": "status", "status": "idle", "deviceId": "phone"}},
	})
	if err != nil || code != http.StatusAccepted || !strings.Contains(body, `"accepted":1`) {
		t.Fatalf("after the renewal: https POST /v1/events = %d %s %v, want 202 accepted 1", code, body, err)
	}
	harness.Eventually(t, 10*time.Second, func() string {
		code, body, err := tlsDo(trusting2, http.MethodGet, query.URL+"/v1/users/"+user+"/status", harness.TestKeys.Reader, nil)
		if err != nil || code != http.StatusOK || !strings.Contains(body, `"status":"idle"`) {
			return fmt.Sprintf("after the renewal: GET /v1/users/%s/status = %d %s %v, want 200 idle", user, code, body, err)
		}
		return ""
	})
	// The old certificate is gone: a client trusting only the first CA is refused.
	for _, s := range []*harness.Service{ingest, query} {
		_, _, err := tlsDo(trusting1, http.MethodGet, s.URL+"/healthz", "", nil)
		if _, ok := errors.AsType[*tls.CertificateVerificationError](err); !ok {
			t.Errorf("%s after the renewal: client trusting only the old CA: err = %v, want a certificate verification error", s.Name, err)
		}
	}
	for _, s := range []*harness.Service{ingest, query} {
		if !strings.Contains(s.Out.String(), "tls: certificate reloaded") {
			t.Errorf("%s logged no reload; output:\n%s", s.Name, harness.LastLines(s.Out.String(), 20))
		}
		select {
		case <-s.Done:
			t.Errorf("%s exited during the renewal (%v)", s.Name, s.Err)
		default:
		}
	}
}

// TestTLSHalfConfiguredRefusesToStart: one of the two files alone is a configuration
// error naming both variables, for ingest and query alike.
func TestTLSHalfConfiguredRefusesToStart(t *testing.T) {
	for _, name := range []string{"ingest", "query"} {
		for _, only := range []string{"PULSE_TLS_CERT_FILE", "PULSE_TLS_KEY_FILE"} {
			env := harness.StackEnv()
			env["PULSE_REDIS_PREFIX"] = "it-" + harness.RandomID(t)
			env[only] = filepath.Join(t.TempDir(), "somewhere.pem")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			cmd := exec.CommandContext(ctx, harness.Binary(name))
			cmd.Env = append(os.Environ(), "PULSE_HTTP_ADDR=127.0.0.1:"+strconv.Itoa(harness.FreePort(t)))
			for k, v := range env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
			out, err := cmd.CombinedOutput()
			timedOut := ctx.Err() != nil
			cancel()
			want := "PULSE_TLS_CERT_FILE and PULSE_TLS_KEY_FILE: set both to serve TLS, or neither for plain HTTP"
			var exit *exec.ExitError
			if !errors.As(err, &exit) || timedOut || !strings.Contains(string(out), want) {
				t.Errorf("%s with only %s: %v; output:\n%s\nwant a failed start saying %q", name, only, err, out, want)
			}
		}
	}
}
