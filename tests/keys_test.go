package tests

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

// testKeys are this run's API keys, made at start and never written down in plain text.
var testKeys = newTestKeys()

type keySet struct {
	producer, reader, operator string
	// reader2 is a second reader, for limits per key.
	reader2 string
	// rotOld and rotNew are two producer keys active at once, as during a rotation.
	rotOld, rotNew string
	// hs256 verifies the user tokens tests sign.
	hs256 string
	// file is the keys file, once TestMain wrote it.
	file string
}

func newTestKeys() keySet {
	var k keySet
	for _, p := range []*string{&k.producer, &k.reader, &k.reader2, &k.operator, &k.rotOld, &k.rotNew, &k.hs256} {
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
	k := &testKeys
	lines := []string{
		"# the integration tests' keys",
		auth.Line("it-producer", auth.ScopeWrite, k.producer),
		auth.Line("it-reader", auth.ScopeRead, k.reader),
		auth.Line("it-reader-2", auth.ScopeRead, k.reader2),
		auth.Line("it-operator", auth.ScopeOperator, k.operator),
		"",
		auth.Line("it-rotation-old", auth.ScopeWrite, k.rotOld),
		auth.Line("it-rotation-new", auth.ScopeWrite, k.rotNew),
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
		auth.KeysFileEnv:         testKeys.file,
		"PULSE_JWT_HS256_SECRET": testKeys.hs256,
		"PULSE_CURSOR_SECRET":    testCursorSecret,
	}
}

// serviceAt maps the host:port of every service a test started to its name, so
// keyTransport knows which key a request wants.
var serviceAt sync.Map

// keyTransport adds the key of the request's service to requests without
// Authorization.
type keyTransport struct{ base http.RoundTripper }

func (t keyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") == "" {
		name, _ := serviceAt.Load(req.URL.Host)
		key := map[any]string{"ingest": testKeys.producer, "query": testKeys.reader}[name]
		if key != "" {
			req = req.Clone(req.Context())
			req.Header.Set("Authorization", "Bearer "+key)
		}
	}
	return t.base.RoundTrip(req)
}

// bareClient sends requests as they are, without a key.
var bareClient = &http.Client{Transport: http.DefaultTransport}

// keyedClient sends requests with the key of their service (keyTransport).
var keyedClient = &http.Client{Transport: keyTransport{base: http.DefaultTransport}}
