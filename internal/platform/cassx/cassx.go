// Package cassx opens Cassandra sessions the way every Pulse component needs them:
// validated configuration, an explicit consistency level and a deadline on every request.
//
// The driver's own defaults are tuned for long-lived servers that can afford to wait;
// Pulse's rule is that nothing hangs, so the session always carries a per-request
// Timeout and a ConnectTimeout, and callers pass contexts for anything that should end
// sooner (an HTTP request, a shutdown).
package cassx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/ports"
)

// Defaults used for zero fields of Config.
const (
	DefaultPort           = 9042
	DefaultConsistency    = "LOCAL_QUORUM"
	DefaultTimeout        = 10 * time.Second
	DefaultConnectTimeout = 5 * time.Second
)

// consistencies are the levels accepted for ordinary reads and writes. ANY, SERIAL and
// LOCAL_SERIAL are left out on purpose: ANY cannot serve reads, and the serial levels
// only make sense for the Paxos phase of lightweight transactions.
var consistencies = map[string]gocql.Consistency{
	"ONE":          gocql.One,
	"TWO":          gocql.Two,
	"THREE":        gocql.Three,
	"QUORUM":       gocql.Quorum,
	"ALL":          gocql.All,
	"LOCAL_QUORUM": gocql.LocalQuorum,
	"EACH_QUORUM":  gocql.EachQuorum,
	"LOCAL_ONE":    gocql.LocalOne,
}

// consistencyNames are the keys of consistencies in the order errors list them.
var consistencyNames = []string{"ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE"}

// keyspaceRE matches the keyspace names Pulse accepts: unquoted CQL identifiers, which
// Cassandra folds to lower case, so upper case is refused rather than silently changed.
var keyspaceRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)

// ValidKeyspace reports whether name can be used unquoted as a Pulse keyspace name.
func ValidKeyspace(name string) bool { return keyspaceRE.MatchString(name) }

// Config describes how to reach a Cassandra cluster. Zero values take the defaults above.
type Config struct {
	// Hosts are the contact points; the driver discovers the rest of the ring from them.
	Hosts []string
	// Port is the CQL native transport port of every node (default 9042).
	Port int
	// Keyspace is the session's default keyspace; empty for none (e.g. before the
	// migrations have created it).
	Keyspace string
	// Consistency is the default level of every query, e.g. LOCAL_QUORUM (default) or ONE.
	Consistency string
	// Timeout bounds each request on the client side (default 10s).
	Timeout time.Duration
	// ConnectTimeout bounds dialling and the connection handshake (default 5s).
	ConnectTimeout time.Duration
	// Username and Password enable PasswordAuthenticator when Username is set; the
	// password may come from PasswordFile instead (read at start).
	Username     string
	Password     string
	PasswordFile string
	// TLS makes every connection TLS (client_encryption_options enabled on the nodes).
	TLS config.ClientTLS
}

// The variables of Cassandra's security, for the errors that name them.
const (
	envPrefix       = "PULSE_CASSANDRA_"
	PasswordEnv     = "PULSE_CASSANDRA_PASSWORD"
	PasswordFileEnv = "PULSE_CASSANDRA_PASSWORD_FILE"
)

// Vars are the Cassandra rows of a service's configuration table, defaulting to the
// local stack. They check what Validate checks of each field; a Password without a
// Username involves two variables and is the service's to check.
func Vars(c *Config) []*config.Var {
	return append(config.Group("cassandra",
		config.List(&c.Hosts, "PULSE_CASSANDRA_HOSTS", []string{"127.0.0.1"},
			"contact points, comma-separated; the driver discovers the rest of the ring", config.NotEmpty),
		config.Int(&c.Port, "PULSE_CASSANDRA_PORT", ports.Cassandra, "CQL port of every node", config.Between(1, 65535)),
		config.String(&c.Keyspace, "PULSE_CASSANDRA_KEYSPACE", "pulse", "keyspace of Pulse's tables", validKeyspace),
		config.String(&c.Consistency, "PULSE_CASSANDRA_CONSISTENCY", DefaultConsistency,
			"consistency level of every read and write", config.OneOf(consistencyNames...)),
		config.Duration(&c.Timeout, "PULSE_CASSANDRA_TIMEOUT", 5*time.Second, "bounds each request", config.Positive),
		config.Duration(&c.ConnectTimeout, "PULSE_CASSANDRA_CONNECT_TIMEOUT", DefaultConnectTimeout,
			"bounds dialling a node and the handshake; 0: 5s", config.NotNegative),
	), securityVars(c)...)
}

// securityVars are the rows of TLS and authentication, which NewSession also reads
// from the environment for a Config made in code.
func securityVars(c *Config) []*config.Var {
	vars := []*config.Var{
		config.String(&c.Username, "PULSE_CASSANDRA_USERNAME", "", "user of Cassandra's PasswordAuthenticator; empty: no authentication"),
		config.String(&c.Password, PasswordEnv, "", "that user's password; or PULSE_CASSANDRA_PASSWORD_FILE").Secret(),
		config.String(&c.PasswordFile, PasswordFileEnv, "",
			"file holding that password (its final line end dropped), instead of PULSE_CASSANDRA_PASSWORD; read at start"),
	}
	vars = append(vars, config.ClientTLSVars(&c.TLS, envPrefix, "Cassandra")...)
	return config.Group("cassandra", vars...)
}

func validKeyspace(name string) (string, bool) {
	return "want a lower-case letter, then up to 47 lower-case letters, digits or underscores", ValidKeyspace(name)
}

// withDefaults returns c with its zero fields filled in.
func (c Config) withDefaults() Config {
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Consistency == "" {
		c.Consistency = DefaultConsistency
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	return c
}

// Validate reports every problem with the configuration, each naming its field.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if len(c.Hosts) == 0 {
		errs = append(errs, errors.New("cassandra Hosts: at least one contact point is required"))
	}
	for i, h := range c.Hosts {
		if strings.TrimSpace(h) == "" {
			errs = append(errs, fmt.Errorf("cassandra Hosts[%d]: empty host", i))
		}
	}
	if c.Port < 1 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("cassandra Port: %d is not a TCP port (1-65535)", c.Port))
	}
	if c.Keyspace != "" && !ValidKeyspace(c.Keyspace) {
		errs = append(errs, fmt.Errorf("cassandra Keyspace: %q is not a valid keyspace name (lower-case letter, then up to 47 lower-case letters, digits or underscores)", c.Keyspace))
	}
	if _, ok := consistencies[strings.ToUpper(c.Consistency)]; !ok {
		errs = append(errs, fmt.Errorf("cassandra Consistency: unknown level %q (want one of %s)", c.Consistency, strings.Join(consistencyNames, ", ")))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("cassandra Timeout: %v is negative", c.Timeout))
	}
	if c.ConnectTimeout < 0 {
		errs = append(errs, fmt.Errorf("cassandra ConnectTimeout: %v is negative", c.ConnectTimeout))
	}
	if c.Username == "" && (c.Password != "" || c.PasswordFile != "") {
		errs = append(errs, errors.New("cassandra Username: required when Password is set"))
	}
	errs = append(errs, c.TLS.Validate(envPrefix), config.CheckSecret(c.Password, c.PasswordFile, PasswordEnv, PasswordFileEnv))
	return errors.Join(errs...)
}

// String describes the configuration for start-up logs, with the password masked.
func (c Config) String() string {
	c = c.withDefaults()
	return fmt.Sprintf("hosts=%s port=%d keyspace=%q consistency=%s timeout=%v connect_timeout=%v username=%q password=%q tls=%t",
		strings.Join(c.Hosts, ","), c.Port, c.Keyspace, strings.ToUpper(c.Consistency), c.Timeout, c.ConnectTimeout, c.Username,
		config.Mask(c.Password+c.PasswordFile), c.TLS.On())
}

// LogValue is String for structured logs.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// withEnvSecurity fills in what cfg leaves unset of TLS, and of the credentials, from
// the environment: a Config made in code (pulsectl's commands build theirs from
// flags) connects the way the services' tables say.
func (c Config) withEnvSecurity() (Config, error) {
	noTLS := c.TLS.IsZero()
	noCreds := c.Username == "" && c.Password == "" && c.PasswordFile == ""
	if !noTLS && !noCreds {
		return c, nil
	}
	var sec Config
	env := config.NewEnv(nil)
	env.Load(securityVars(&sec)...)
	if err := env.Err(); err != nil {
		return c, err
	}
	if noTLS {
		c.TLS = sec.TLS
	}
	if noCreds {
		c.Username, c.Password, c.PasswordFile = sec.Username, sec.Password, sec.PasswordFile
	}
	return c, nil
}

// NewSession validates cfg and connects. The driver offers no context for connecting;
// ConnectTimeout bounds each dial and handshake, and connectDeadline the whole. What cfg leaves unset of TLS,
// and of the credentials, comes from the environment (PULSE_CASSANDRA_TLS*,
// PULSE_CASSANDRA_USERNAME, PULSE_CASSANDRA_PASSWORD*), as the services' tables read it.
func NewSession(cfg Config) (*gocql.Session, error) {
	cfg, err := cfg.withEnvSecurity()
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	password, err := config.Secret(cfg.Password, cfg.PasswordFile, PasswordEnv, PasswordFileEnv)
	if err != nil {
		return nil, err
	}
	tc, err := cfg.TLS.Load(envPrefix)
	if err != nil {
		return nil, err
	}

	hosts := make([]string, len(cfg.Hosts))
	for i, h := range cfg.Hosts {
		hosts[i] = strings.TrimSpace(h)
	}
	cluster := gocql.NewCluster(hosts...)
	cluster.Port = cfg.Port
	cluster.Keyspace = cfg.Keyspace
	cluster.Consistency = consistencies[strings.ToUpper(cfg.Consistency)]
	cluster.Timeout = cfg.Timeout
	cluster.WriteTimeout = cfg.Timeout
	cluster.ConnectTimeout = cfg.ConnectTimeout
	if cfg.Username != "" {
		cluster.Authenticator = gocql.PasswordAuthenticator{Username: cfg.Username, Password: password}
	}
	if tc != nil {
		// The host is checked against the certificate: the driver names each node's
		// address as the server name.
		cluster.SslOpts = &gocql.SslOptions{Config: tc, EnableHostVerification: true}
	}

	session, err := createSession(cluster, connectDeadline(cfg))
	if err != nil {
		return nil, fmt.Errorf("connecting to cassandra at %s port %d: %w", strings.Join(hosts, ","), cfg.Port, err)
	}
	return session, nil
}

// connectDeadline bounds a whole connect: the driver's dials, handshakes and its
// reads of the ring and the schema, each already bounded by ConnectTimeout or
// Timeout, but not their sum, nor a wait inside the driver on a node that accepts
// connections and does not answer yet (a node starting up).
func connectDeadline(cfg Config) time.Duration {
	return max(30*time.Second, 4*cfg.ConnectTimeout+2*cfg.Timeout)
}

// createSession is cluster.CreateSession that gives up after d. A session the
// driver finishes after that is closed at once.
func createSession(cluster *gocql.ClusterConfig, d time.Duration) (*gocql.Session, error) {
	type result struct {
		s   *gocql.Session
		err error
	}
	done := make(chan result) // unbuffered: a late session goes to exactly one side
	abandoned := make(chan struct{})
	go func() {
		s, err := cluster.CreateSession()
		select {
		case done <- result{s, err}:
		case <-abandoned:
			if err == nil {
				s.Close()
			}
		}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-done:
		return r.s, r.err
	case <-t.C:
		close(abandoned)
		return nil, fmt.Errorf("no session after %v", d)
	}
}

// Ping runs a cheap query that every node answers from its local system tables, so it
// proves the session can reach a coordinator and get a response within ctx.
func Ping(ctx context.Context, session *gocql.Session) error {
	var version string
	if err := session.Query(`SELECT release_version FROM system.local`).
		Consistency(gocql.One).
		ScanContext(ctx, &version); err != nil {
		return fmt.Errorf("pinging cassandra: %w", err)
	}
	return nil
}
