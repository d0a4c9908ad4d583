// Package trust is how Pulse's commands (pulsectl, loadgen, bench) trust the
// certificate of an https service: the system's roots, plus the CA certificates of a
// PEM file when one is given, for services whose certificate a private CA signed.
package trust

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
)

// CAFileEnv names the PEM file of CA certificates trusted besides the system's; the
// commands' -ca flag defaults to it.
const CAFileEnv = "PULSE_TLS_CA_FILE"

// Flag adds -ca to fs, defaulting to $PULSE_TLS_CA_FILE, and returns its value.
func Flag(fs *flag.FlagSet, getenv func(string) string) *string {
	return fs.String("ca", getenv(CAFileEnv),
		"PEM `file` of CA certificates trusted besides the system's, for https URLs (env "+CAFileEnv+")")
}

// Config is the client TLS configuration trusting the system's roots and caFile's
// certificates; "" trusts the system's roots alone.
func Config(caFile string) (*tls.Config, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		// No system pool (some minimal containers): the private CA alone.
		pool = x509.NewCertPool()
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("reading the CA file: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", caFile)
		}
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}
