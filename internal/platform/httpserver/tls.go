package httpserver

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

// The variables naming the TLS files, for the errors that name them.
const (
	CertFileEnv     = "PULSE_TLS_CERT_FILE"
	KeyFileEnv      = "PULSE_TLS_KEY_FILE"
	ClientCAFileEnv = "PULSE_TLS_CLIENT_CA_FILE"
)

// TLSConfig is where the server's certificate lives. Both files set: the server
// speaks only TLS (docs/design.md, Security); neither: plain HTTP.
type TLSConfig struct {
	// CertFile is the PEM certificate chain, leaf first; KeyFile its private key.
	// Both are read again when either changes on disk (certReloader).
	CertFile string
	KeyFile  string
	// ClientCAFile, when set, holds the PEM CA certificates client certificates must
	// chain to: every connection must present one (mutual TLS). Read at start only.
	ClientCAFile string
}

// Enabled reports whether the server serves TLS.
func (c TLSConfig) Enabled() bool { return c.CertFile != "" && c.KeyFile != "" }

// Validate reports settings that make sense only together.
func (c TLSConfig) Validate() error {
	var errs []error
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, fmt.Errorf("%s and %s: set both to serve TLS, or neither for plain HTTP", CertFileEnv, KeyFileEnv))
	}
	if c.ClientCAFile != "" && !c.Enabled() {
		errs = append(errs, fmt.Errorf("%s: needs %s and %s (mutual TLS is TLS first)", ClientCAFileEnv, CertFileEnv, KeyFileEnv))
	}
	return errors.Join(errs...)
}

// TLSVars are the TLS rows of the table of a service that faces clients (ingest,
// query). A service without them serves plain HTTP.
func TLSVars(c *TLSConfig) []*config.Var {
	return config.Group("tls",
		config.String(&c.CertFile, CertFileEnv, "",
			"PEM certificate chain (leaf first) served on the HTTP port; with PULSE_TLS_KEY_FILE the port speaks only TLS 1.2 or later, without both plain HTTP; read again when it changes on disk"),
		config.String(&c.KeyFile, KeyFileEnv, "",
			"PEM private key of PULSE_TLS_CERT_FILE; set both or neither"),
		config.String(&c.ClientCAFile, ClientCAFileEnv, "",
			"PEM CA certificates a client certificate must chain to: every connection, probes included, must present one (mutual TLS); empty: none asked; read at start"),
	)
}

// reloadCheckInterval is how often, at most, a handshake looks at the files'
// modification times: a changed certificate is served within about a second, and a
// busy port does not stat two files per connection.
const reloadCheckInterval = time.Second

// newTLSConfig is the server's crypto/tls configuration: the reloader's certificate,
// TLS 1.2 at least, and the client CAs when mutual TLS is asked for.
func newTLSConfig(c TLSConfig, r *certReloader) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.GetCertificate,
	}
	if c.ClientCAFile != "" {
		pem, err := os.ReadFile(c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", ClientCAFileEnv, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s=%s: no PEM certificate in it", ClientCAFileEnv, c.ClientCAFile)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// fileStamp is what tells that a file changed: replacing it (rename) or rewriting it
// changes its modification time, and usually its size.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stat(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

// certReloader serves a certificate and key pair from files and loads them again when
// either file changes, so a renewed certificate is served without a restart. It looks
// at the files on a handshake, at most once per interval. A pair that does not load
// (a half-written renewal, a key that does not match) is logged once and the previous
// pair kept; the next change of either file is tried again.
type certReloader struct {
	certFile, keyFile string
	interval          time.Duration
	now               func() time.Time
	logger            *slog.Logger
	// loaded is called with every pair put in service, for the expiry metric.
	loaded func(*tls.Certificate)

	mu      sync.Mutex
	cert    *tls.Certificate
	stamps  [2]fileStamp // of the pair last tried, loaded or not
	checked time.Time
}

func newCertReloader(certFile, keyFile string, logger *slog.Logger) *certReloader {
	return &certReloader{
		certFile: certFile,
		keyFile:  keyFile,
		interval: reloadCheckInterval,
		now:      time.Now,
		logger:   logger,
		loaded:   func(*tls.Certificate) {},
	}
}

// load reads the pair for the first time; a pair that does not load stops the start.
func (r *certReloader) load() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	stamps, err := r.stat()
	if err != nil {
		return err
	}
	cert, err := r.read()
	if err != nil {
		return err
	}
	r.cert, r.stamps, r.checked = cert, stamps, r.now()
	r.loaded(cert)
	return nil
}

// GetCertificate is tls.Config's hook: the current pair, read again first when the
// files changed since the last look.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= r.interval {
		r.checked = now
		r.reloadLocked()
	}
	if r.cert == nil {
		return nil, errors.New("no TLS certificate loaded")
	}
	return r.cert, nil
}

func (r *certReloader) reloadLocked() {
	stamps, err := r.stat()
	if err != nil {
		// A file being replaced may be missing for a moment; the next look tries again.
		if stamps != r.stamps {
			r.logger.Warn("tls: cannot read the certificate files; serving the previous certificate", "err", err)
			r.stamps = stamps
		}
		return
	}
	if stamps == r.stamps {
		return
	}
	r.stamps = stamps
	cert, err := r.read()
	if err != nil {
		r.logger.Error("tls: the changed certificate files do not load; serving the previous certificate", "err", err)
		return
	}
	r.cert = cert
	r.loaded(cert)
	r.logger.Info("tls: certificate reloaded", "subject", cert.Leaf.Subject.String(),
		"not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
}

// stat is the stamps of both files; on an error, those it could read (zero for the
// others), so a missing file is reported once.
func (r *certReloader) stat() ([2]fileStamp, error) {
	var stamps [2]fileStamp
	var errs []error
	for i, path := range []string{r.certFile, r.keyFile} {
		s, err := stat(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", []string{CertFileEnv, KeyFileEnv}[i], err))
		}
		stamps[i] = s
	}
	return stamps, errors.Join(errs...)
}

func (r *certReloader) read() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading %s=%s and %s=%s: %w", CertFileEnv, r.certFile, KeyFileEnv, r.keyFile, err)
	}
	// LoadX509KeyPair parses the leaf since Go 1.23; kept explicit for the log and metric.
	if cert.Leaf == nil {
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", CertFileEnv, err)
		}
		cert.Leaf = leaf
	}
	return &cert, nil
}
