// Package redisx builds go-redis clients with Pulse's deadlines, for one Redis or a
// Redis Cluster, and checks that the server answers.
package redisx

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/ports"
)

// Config is how a service reaches Redis. One address means a single server; several
// mean a Redis Cluster reached through those seed nodes.
type Config struct {
	Addrs []string
	// Username is an ACL user (Redis 6 and later); empty: the default user.
	Username string
	// Password, or PasswordFile naming a file that holds it (read at start); one of them.
	Password     string
	PasswordFile string
	DB           int
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	PoolSize     int
	// TLS makes every connection TLS (a server started with --tls-port).
	TLS config.ClientTLS
}

// The variables of Redis's security, for the errors that name them.
const (
	envPrefix       = "PULSE_REDIS_"
	PasswordEnv     = "PULSE_REDIS_PASSWORD"
	PasswordFileEnv = "PULSE_REDIS_PASSWORD_FILE"
)

// Vars are the Redis rows of a service's configuration table.
func Vars(c *Config) []*config.Var {
	return append(config.Group("redis",
		config.List(&c.Addrs, "PULSE_REDIS_ADDR", []string{ports.LocalAddr(ports.Redis)},
			"one address: a single Redis; several, comma-separated: seed nodes of a Redis Cluster", config.NotEmpty),
		config.Int(&c.DB, "PULSE_REDIS_DB", 0, "database number of a single Redis; a cluster has only 0"),
		config.Duration(&c.DialTimeout, "PULSE_REDIS_DIAL_TIMEOUT", 2*time.Second, "bounds opening a connection", config.Positive),
		config.Duration(&c.ReadTimeout, "PULSE_REDIS_READ_TIMEOUT", time.Second, "bounds reading one reply", config.Positive),
		config.Duration(&c.WriteTimeout, "PULSE_REDIS_WRITE_TIMEOUT", time.Second, "bounds writing one command", config.Positive),
		config.Int(&c.PoolSize, "PULSE_REDIS_POOL_SIZE", 0, "connections per node; 0: go-redis's default, 10 per CPU", config.NotNegative),
	), securityVars(c)...)
}

// securityVars are the rows of TLS and AUTH, which NewClient also reads from the
// environment for a Config made in code.
func securityVars(c *Config) []*config.Var {
	vars := []*config.Var{
		config.String(&c.Username, "PULSE_REDIS_USERNAME", "", "ACL user every connection authenticates as (AUTH user password); empty: the default user"),
		config.String(&c.Password, PasswordEnv, "", "password of Redis's AUTH; empty: none; or PULSE_REDIS_PASSWORD_FILE").Secret(),
		config.String(&c.PasswordFile, PasswordFileEnv, "",
			"file holding that password (its final line end dropped), instead of PULSE_REDIS_PASSWORD; read at start"),
	}
	vars = append(vars, config.ClientTLSVars(&c.TLS, envPrefix, "Redis")...)
	return config.Group("redis", vars...)
}

// ConfigFromEnv reads the Redis rows (Vars) through e, which collects bad values.
func ConfigFromEnv(e *config.Env) Config {
	var c Config
	e.Load(Vars(&c)...)
	return c
}

// Validate names what no single variable's rules can see: a database number on a
// cluster, a password given twice, half a client certificate; and it reads the TLS and
// password files, so a service whose files do not load stops at start (NewClient,
// which returns no error, would only fail every command).
func (c Config) Validate() error {
	var errs []error
	if len(c.Addrs) > 1 && c.DB != 0 {
		errs = append(errs, errors.New("PULSE_REDIS_DB: Redis Cluster has only database 0"))
	}
	if err := c.validateSecurity(); err != nil {
		errs = append(errs, err)
	} else if _, _, err := security(c); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c Config) validateSecurity() error {
	errs := []error{c.TLS.Validate(envPrefix), config.CheckSecret(c.Password, c.PasswordFile, PasswordEnv, PasswordFileEnv)}
	if c.Username != "" && c.Password == "" && c.PasswordFile == "" {
		errs = append(errs, fmt.Errorf("PULSE_REDIS_USERNAME=%q: needs %s or %s", c.Username, PasswordEnv, PasswordFileEnv))
	}
	return errors.Join(errs...)
}

// LogValue is the configuration for start-up logs, the password masked.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Any("addrs", c.Addrs),
		slog.String("username", c.Username),
		slog.String("password", config.Mask(c.Password+c.PasswordFile)),
		slog.Bool("tls", c.TLS.On()),
		slog.Int("db", c.DB),
		slog.Duration("read_timeout", c.ReadTimeout),
	)
}

// String is LogValue's text, for %v.
func (c Config) String() string { return c.LogValue().String() }

// withEnvSecurity fills in TLS and AUTH from the environment when cfg has none of
// them: a Config made in code (pulsectl's commands build theirs from flags) connects
// the way the services' tables say.
func (c Config) withEnvSecurity() (Config, error) {
	if !c.TLS.IsZero() || c.Username != "" || c.Password != "" || c.PasswordFile != "" {
		return c, nil
	}
	var sec Config
	env := config.NewEnv(nil)
	env.Load(securityVars(&sec)...)
	if err := env.Err(); err != nil {
		return c, err
	}
	c.TLS, c.Username, c.Password, c.PasswordFile = sec.TLS, sec.Username, sec.Password, sec.PasswordFile
	return c, nil
}

// security resolves cfg's TLS configuration and password.
func security(cfg Config) (Config, *tls.Config, error) {
	cfg, err := cfg.withEnvSecurity()
	if err != nil {
		return cfg, nil, err
	}
	if err := cfg.validateSecurity(); err != nil {
		return cfg, nil, err
	}
	if cfg.Password, err = config.Secret(cfg.Password, cfg.PasswordFile, PasswordEnv, PasswordFileEnv); err != nil {
		return cfg, nil, err
	}
	tc, err := cfg.TLS.Load(envPrefix)
	return cfg, tc, err
}

// NewClient returns a client for cfg: a cluster client for several addresses, else a
// single-server client. Socket timeouts apply to every command; callers add contexts.
// A cfg with no TLS, user or password takes them from the environment
// (PULSE_REDIS_TLS*, PULSE_REDIS_USERNAME, PULSE_REDIS_PASSWORD*), as the services'
// tables read them. Settings that do not load (a missing CA file, an unreadable
// password file) make every command of the client fail with the reason, so the
// service's readiness check and start-up ping name it.
func NewClient(cfg Config) redis.UniversalClient {
	cfg, tc, secErr := security(cfg)
	opts := &redis.UniversalOptions{
		Addrs:        cfg.Addrs,
		Username:     cfg.Username,
		Password:     cfg.Password,
		TLSConfig:    tc,
		DB:           cfg.DB,
		DialTimeout:  cfg.DialTimeout,
		ReadTimeout:  cfg.ReadTimeout,
		WriteTimeout: cfg.WriteTimeout,
		PoolSize:     cfg.PoolSize,
		// Honour context deadlines on the socket too, so a caller's deadline is exact.
		ContextTimeoutEnabled: true,
	}
	if secErr != nil {
		err := fmt.Errorf("redis client: %w", secErr)
		opts.Dialer = func(context.Context, string, string) (net.Conn, error) { return nil, err }
	}
	return redis.NewUniversalClient(opts)
}

// Ping fails unless Redis answers PING with PONG.
func Ping(ctx context.Context, c redis.UniversalClient) error {
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	return nil
}

// DeletePrefix unlinks every key under prefix: and answers how many. It SCANs every
// master (the one of a lone Redis, each of a cluster's, which lists only its own keys)
// and unlinks what each batch found in a pipeline of single-key UNLINKs, so no command
// spans two slots.
func DeletePrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) (int, error) {
	var n atomic.Int64
	scan := func(ctx context.Context, node *redis.Client) error {
		var cursor uint64
		for {
			// A modest COUNT keeps each SCAN, which blocks Redis, to about a millisecond.
			keys, next, err := node.Scan(ctx, cursor, prefix+":*", 1000).Result()
			if err != nil {
				return fmt.Errorf("SCAN %s:*: %w", prefix, err)
			}
			if len(keys) > 0 {
				pipe := rdb.Pipeline()
				for _, k := range keys {
					pipe.Unlink(ctx, k)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					return fmt.Errorf("UNLINK under %s: %w", prefix, err)
				}
				n.Add(int64(len(keys)))
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		err = fmt.Errorf("deleting %s: a Redis client of type %T", prefix, rdb)
	}
	return int(n.Load()), err
}
