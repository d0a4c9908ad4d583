package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
)

// ClientTLS is how a Pulse client reaches one kind of server (Kafka, Redis, Cassandra)
// over TLS. Each of internal/platform/kafkax, internal/platform/redisx and internal/platform/cassx embeds one and contributes its
// rows with ClientTLSVars under its own prefix, so the three hops are configured alike:
// PREFIX_TLS, PREFIX_TLS_CA_FILE, PREFIX_TLS_CERT_FILE, PREFIX_TLS_KEY_FILE, where the
// prefix ends in an underscore ("PULSE_KAFKA_").
type ClientTLS struct {
	// Enabled asks for TLS with the system's roots; any file below implies it.
	Enabled bool
	// CAFile holds the PEM certificates the server's chain must end in; when set, the
	// system's roots are not trusted for this server.
	CAFile string
	// CertFile and KeyFile are the client's own PEM certificate chain and key, for
	// servers that ask for one (mutual TLS); both or neither.
	CertFile string
	KeyFile  string
}

// ClientTLSVars are the TLS rows of a client of server ("Kafka's brokers"), named after
// prefix ("PULSE_KAFKA_").
func ClientTLSVars(c *ClientTLS, prefix, server string) []*Var {
	return []*Var{
		Bool(&c.Enabled, prefix+"TLS", false,
			"connect to "+server+" over TLS (1.2 or later, the certificate checked against the address's host); implied by any "+prefix+"TLS_*_FILE; false and no file: plain TCP"),
		String(&c.CAFile, prefix+"TLS_CA_FILE", "",
			"PEM CA certificates "+server+"'s certificates must chain to, instead of the system's roots; read at start"),
		String(&c.CertFile, prefix+"TLS_CERT_FILE", "",
			"PEM client certificate chain presented to "+server+" (mutual TLS), with "+prefix+"TLS_KEY_FILE; read at start"),
		String(&c.KeyFile, prefix+"TLS_KEY_FILE", "",
			"PEM private key of "+prefix+"TLS_CERT_FILE; set both or neither"),
	}
}

// On reports whether connections use TLS.
func (c ClientTLS) On() bool {
	return c.Enabled || c.CAFile != "" || c.CertFile != "" || c.KeyFile != ""
}

// IsZero reports whether nothing of c is set.
func (c ClientTLS) IsZero() bool { return c == ClientTLS{} }

// Validate names what one variable alone cannot: a certificate without its key, or a
// key without its certificate. The files themselves are read by Load.
func (c ClientTLS) Validate(prefix string) error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("%sTLS_CERT_FILE and %sTLS_KEY_FILE: set both to present a client certificate, or neither", prefix, prefix)
	}
	return nil
}

// Load reads the files and returns the crypto/tls configuration of a client, or nil
// when c asks for no TLS. Errors name the variable and the file, never its content.
func (c ClientTLS) Load(prefix string) (*tls.Config, error) {
	if !c.On() {
		return nil, nil
	}
	if err := c.Validate(prefix); err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		raw, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%sTLS_CA_FILE: %w", prefix, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(raw) {
			return nil, fmt.Errorf("%sTLS_CA_FILE=%s: no PEM certificate in the file", prefix, c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%sTLS_CERT_FILE=%s and %sTLS_KEY_FILE=%s: %w", prefix, c.CertFile, prefix, c.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// Secret returns a secret given either as the value of the variable valueEnv or as
// the content of the file named by fileEnv (a mounted secret), without its final line
// end. Both set, or an empty or unreadable file, is an error that names the variables
// and the file but never shows the secret.
func Secret(value, file, valueEnv, fileEnv string) (string, error) {
	if err := CheckSecret(value, file, valueEnv, fileEnv); err != nil {
		return "", err
	}
	if file == "" {
		return value, nil
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", fileEnv, err)
	}
	s := strings.TrimRight(string(raw), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s=%s: the file is empty", fileEnv, file)
	}
	return s, nil
}

// CheckSecret names what Secret would refuse without reading the file: both given.
func CheckSecret(value, file, valueEnv, fileEnv string) error {
	if value != "" && file != "" {
		return fmt.Errorf("%s and %s: set one, not both", valueEnv, fileEnv)
	}
	return nil
}
