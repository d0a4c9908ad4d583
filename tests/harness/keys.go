package harness

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/pulse-presence/pulse/internal/api/auth"
)

// The services the tests start authenticate every request, as in production
// (docs/design.md, Security): TestMain writes the digests of testKeys to a keys
// file, stackEnv points every service at it, and every request the tests make
// through keyedClient — the helpers', the WebSocket dialers' — carries the key its
// service wants unless it sets Authorization itself: the producer key for ingest,
// the reader key for query. Tests of refusals use bareClient. http.DefaultClient is
// left as it is.

// TestKeys are this run's API keys, made at start and never written down in plain text.
var TestKeys = newTestKeys()

type keySet struct {
	Producer, Reader, Operator string
	// Reader2 is a second reader, for limits per key.
	Reader2 string
	// Admin has the write and operator scopes: query's group writes and its reads.
	Admin string
	// RotOld and RotNew are two producer keys active at once, as during a rotation.
	RotOld, RotNew string
	// Hs256 verifies the user tokens tests sign.
	Hs256 string
	// file is the keys file, once TestMain wrote it.
	file string
}

func newTestKeys() keySet {
	var k keySet
	for _, p := range []*string{&k.Producer, &k.Reader, &k.Reader2, &k.Operator, &k.Admin, &k.RotOld, &k.RotNew, &k.Hs256} {
		key, err := auth.NewKey()
		if err != nil {
			panic(err)
		}
		*p = key
	}
	return k
}

// writeKeysFile writes the keys file into dir, as an operator would: digests only.
func writeKeysFile(dir string) error {
	k := &TestKeys
	lines := []string{
		"# the integration tests' keys",
		auth.Line("it-producer", auth.ScopeWrite, k.Producer),
		auth.Line("it-reader", auth.ScopeRead, k.Reader),
		auth.Line("it-reader-2", auth.ScopeRead, k.Reader2),
		auth.Line("it-operator", auth.ScopeOperator, k.Operator),
		auth.Line("it-admin", auth.ScopeWrite|auth.ScopeOperator, k.Admin),
		"",
		auth.Line("it-rotation-old", auth.ScopeWrite, k.RotOld),
		auth.Line("it-rotation-new", auth.ScopeWrite, k.RotNew),
	}
	k.file = filepath.Join(dir, "api-keys")
	if err := os.WriteFile(k.file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing the keys file: %w", err)
	}
	return nil
}

// testCursorSecret signs the cursors of every query the tests start, so that one
// instance accepts another's.
const testCursorSecret = "the tests' cursor secret, thirty-two bytes or more"

// authEnv is what every service the tests start is told about authentication.
func authEnv() map[string]string {
	return map[string]string{
		auth.KeysFileEnv:         TestKeys.file,
		"PULSE_JWT_HS256_SECRET": TestKeys.Hs256,
		"PULSE_CURSOR_SECRET":    testCursorSecret,
	}
}

// ServiceAt maps the host:port of every service a test started to its name, so
// keyTransport knows which key a request wants.
var ServiceAt sync.Map

// keyTransport adds the key of the request's service to requests without
// Authorization.
type keyTransport struct{ Base http.RoundTripper }

func (t keyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") == "" {
		name, _ := ServiceAt.Load(req.URL.Host)
		key := map[any]string{"ingest": TestKeys.Producer, "query": TestKeys.Reader}[name]
		if key != "" {
			req = req.Clone(req.Context())
			req.Header.Set("Authorization", "Bearer "+key)
		}
	}
	return t.Base.RoundTrip(req)
}

// BareClient sends requests as they are, without a key.
var BareClient = &http.Client{Transport: http.DefaultTransport}

// KeyedClient sends requests with the key of their service (keyTransport).
var KeyedClient = &http.Client{Transport: keyTransport{Base: http.DefaultTransport}}
