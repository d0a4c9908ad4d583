package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
	"github.com/pulse-presence/pulse/tests/harness"
)

// The backend hops over TLS (docs/design.md, Security): the services and pulsectl
// reach Kafka over SASL_SSL as a SCRAM user and over mutual TLS, Redis over TLS as an
// ACL user, and Cassandra over TLS with a password, all configured by the shared
// PULSE_{KAFKA,REDIS,CASSANDRA}_TLS* and credential variables. The stack's servers
// speak plain TCP, so each test starts a private server configured that way, from the
// stack's own binaries and jars, on free ports, with certificates made by a throwaway
// CA (backend_certs_test.go); and shows an event flowing through it end to end, a
// plain client refused, and a wrong password refused with a clear error.

// serverProc is a server process a test started; the cleanup stops it.
type serverProc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startServerProc runs argv with its output in logFile, and stops it with SIGTERM
// (SIGKILL after 30 s) at cleanup.
func startServerProc(t *testing.T, name, logFile string, argv ...string) *serverProc {
	t.Helper()
	out, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	p := &serverProc{name: name, cmd: exec.Command(argv[0], argv[1:]...), log: logFile, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	// A test binary killed by its timeout runs no cleanup: the kernel stops the server then.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); out.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitReady calls probe until it succeeds, failing the test with the server's log when
// the process exits or timeout passes.
func (p *serverProc) waitReady(t *testing.T, timeout time.Duration, probe func(context.Context) error) {
	t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < timeout {
		select {
		case <-p.done:
			t.Fatalf("%s exited while starting; its log:\n%s", p.name, p.tail(40))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = probe(ctx)
		cancel()
		if err == nil {
			t.Logf("%s ready in %v", p.name, time.Since(start).Round(100*time.Millisecond))
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s not ready in %v: %v; its log:\n%s", p.name, timeout, err, p.tail(40))
}

// tail is the last n lines of the server's log.
func (p *serverProc) tail(n int) string {
	f, err := os.Open(p.log)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lastLinesOf(lines, n)
}

func lastLinesOf(lines []string, n int) string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// jarDir is the folder of one server's jars in the stack's cache.
func jarDir(t *testing.T, server string) string {
	t.Helper()
	lib, err := filepath.Abs(filepath.Join(stackHome(), "cache", server, "lib"))
	if err != nil {
		t.Fatal(err)
	}
	if jars, _ := filepath.Glob(filepath.Join(lib, "*.jar")); len(jars) == 0 {
		t.Fatalf("no %s jars in %s: make up fetches them", server, lib)
	}
	return lib
}

// writeSecret writes a password file as a secret mount holds it: one line.
func writeSecret(t *testing.T, path, secret string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// withEnv is base with extra added.
func withEnv(base map[string]string, extra map[string]string) map[string]string {
	env := map[string]string{}
	for k, v := range base {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// runPulsectl runs pulsectl with args and the extra environment, and returns its
// output and error.
func runPulsectl(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness.Binary("pulsectl"), args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// postOnlineAndWait posts user online to ingest and waits until query answers it online.
func postOnlineAndWait(t *testing.T, ingest, query *harness.Service, user string) {
	t.Helper()
	if code, body := harness.PostJSON(t, ingest.URL+"/status", map[string]string{"userId": user, "status": "online"}); code != http.StatusOK {
		t.Fatalf("POST /status = %d %s", code, body)
	}
	harness.Eventually(t, 30*time.Second, func() string {
		code, body := harness.Get(t, query.URL+"/status/"+user)
		var st struct {
			Status string `json:"status"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.Status != "online" {
			return fmt.Sprintf("GET /status/%s = %d %s", user, code, body)
		}
		return ""
	})
}

// noSecretInOutput fails t when a service printed any of secrets.
func noSecretInOutput(t *testing.T, secrets []string, svcs ...*harness.Service) {
	t.Helper()
	for _, s := range svcs {
		out := s.Out.String()
		for _, secret := range secrets {
			if strings.Contains(out, secret) {
				t.Errorf("%s printed a secret; its output:\n%s", s.Name, out)
			}
		}
	}
}

// readyzFails waits until s's /readyz answers 503 with the check name failing as
// "<name> unavailable" (the network learns no more) and s's log gives the reason, an
// error that contains want.
func readyzFails(t *testing.T, s *harness.Service, name, want string) {
	t.Helper()
	harness.Eventually(t, 30*time.Second, func() string {
		code, rep := readyz(t, s)
		for _, c := range rep.Checks {
			if c.Name == name && !c.OK && c.Error == name+" unavailable" && code == http.StatusServiceUnavailable {
				for _, l := range strings.Split(s.Out.String(), "\n") {
					if strings.Contains(l, "readiness check failed") && strings.Contains(l, "check="+name) && strings.Contains(l, want) {
						return ""
					}
				}
				return fmt.Sprintf("%s's log has no readiness check failed line for %s with %q", s.Name, name, want)
			}
		}
		return fmt.Sprintf("%s /readyz = %d %+v, want 503 with %s unavailable", s.Name, code, rep, name)
	})
}

// stopsAtStart runs the service name with env and fails t unless it exits with an
// error within a minute, its output containing want and none of secrets.
func stopsAtStart(t *testing.T, name string, env map[string]string, want string, secrets ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness.Binary(name))
	cmd.Env = append(os.Environ(), "PULSE_HTTP_ADDR=127.0.0.1:"+strconv.Itoa(harness.FreePort(t)))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil || !strings.Contains(string(out), want) {
		t.Fatalf("%s: %v, want it to stop at start naming %q; output:\n%s", name, err, want, out)
	}
	for _, s := range secrets {
		if strings.Contains(string(out), s) {
			t.Fatalf("%s printed a secret:\n%s", name, out)
		}
	}
	t.Logf("%s stopped at start: %s", name, lastLinesOf(strings.Split(strings.TrimSpace(string(out)), "\n"), 1))
}

// startTLSRedis runs a private redis-server that speaks only TLS (no plain port), asks
// every client for a certificate of certs' CA, and knows one ACL user besides the
// disabled default user.
func startTLSRedis(t *testing.T, dir string, certs *backendCerts, user, password string) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (make up installs it): %v", err)
	}
	port := harness.FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p := startServerProc(t, "redis (TLS)", filepath.Join(dir, "redis.log"), path,
		"--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", certs.serverCert, "--tls-key-file", certs.serverKey,
		"--tls-ca-cert-file", certs.caFile, "--tls-auth-clients", "yes",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--user", "default", "off",
		"--user", user, "on", ">"+password, "~*", "&*", "+@all")
	cfg := redisx.Config{Addrs: []string{addr}, Username: user, Password: password, DialTimeout: 2 * time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		TLS: config.ClientTLS{CAFile: certs.caFile, CertFile: certs.clientCert, KeyFile: certs.clientKey}}
	c := redisx.NewClient(cfg)
	defer c.Close()
	p.waitReady(t, 20*time.Second, func(ctx context.Context) error { return redisx.Ping(ctx, c) })
	return addr
}

// Redis over TLS as an ACL user: aggregator and query keep a user's state in a Redis
// that speaks only TLS and asks for client certificates; pulsectl reaches it through
// the same variables. A plain client, a client without a certificate, and a wrong
// password are refused, the last with Redis's WRONGPASS named on the service's /readyz.
func TestBackendTLSRedis(t *testing.T) {
	dir := t.TempDir()
	certs := newBackendCerts(t, dir)
	password := "redis-" + harness.RandomID(t) + harness.RandomID(t)
	addr := startTLSRedis(t, dir, certs, "pulse", password)
	redisEnv := map[string]string{
		"PULSE_REDIS_ADDR":          addr,
		"PULSE_REDIS_USERNAME":      "pulse",
		"PULSE_REDIS_PASSWORD_FILE": writeSecret(t, filepath.Join(dir, "redis-password"), password),
		"PULSE_REDIS_TLS_CA_FILE":   certs.caFile,
		"PULSE_REDIS_TLS_CERT_FILE": certs.clientCert,
		"PULSE_REDIS_TLS_KEY_FILE":  certs.clientKey,
	}

	t.Run("pipeline", func(t *testing.T) {
		p := harness.NewTopics(t, 2)
		p.Env = withEnv(p.Env, redisEnv)
		for _, name := range []string{"aggregator", "ingest", "query"} {
			p.Start(t, name)
		}
		postOnlineAndWait(t, p.Svc["ingest"], p.Svc["query"], "tls-redis-"+p.Run)
		noSecretInOutput(t, []string{password}, p.Svc["aggregator"], p.Svc["query"])
	})

	t.Run("pulsectl", func(t *testing.T) {
		if out, err := runPulsectl(t, redisEnv, "wait", "-timeout", "20s", "-redis", addr); err != nil {
			t.Fatalf("pulsectl wait -redis over TLS: %v\n%s", err, out)
		}
	})

	refused := func(t *testing.T, cfg redisx.Config) error {
		t.Helper()
		cfg.Addrs, cfg.DialTimeout, cfg.ReadTimeout, cfg.WriteTimeout = []string{addr}, 2*time.Second, 2*time.Second, 2*time.Second
		c := redisx.NewClient(cfg)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := redisx.Ping(ctx, c)
		if err == nil {
			t.Fatalf("%+v: PING answered; want it refused", cfg)
		}
		return err
	}
	mtls := config.ClientTLS{CAFile: certs.caFile, CertFile: certs.clientCert, KeyFile: certs.clientKey}
	t.Run("plain client refused", func(t *testing.T) {
		t.Logf("plain: %v", refused(t, redisx.Config{Username: "pulse", Password: password}))
	})
	t.Run("client without certificate refused", func(t *testing.T) {
		t.Logf("no certificate: %v", refused(t, redisx.Config{Username: "pulse", Password: password, TLS: config.ClientTLS{CAFile: certs.caFile}}))
	})
	t.Run("wrong password refused", func(t *testing.T) {
		err := refused(t, redisx.Config{Username: "pulse", Password: "not-" + password, TLS: mtls})
		if !strings.Contains(err.Error(), "WRONGPASS") {
			t.Fatalf("wrong password: %v, want WRONGPASS", err)
		}
		t.Logf("wrong password: %v", err)
		// The default user is off: no password is no way in either.
		if err := refused(t, redisx.Config{TLS: mtls}); !strings.Contains(err.Error(), "NOAUTH") && !strings.Contains(err.Error(), "WRONGPASS") {
			t.Fatalf("no user: %v, want NOAUTH or WRONGPASS", err)
		}
		env := withEnv(harness.NewTopics(t, 2).Env, redisEnv)
		env["PULSE_REDIS_PASSWORD_FILE"] = writeSecret(t, filepath.Join(dir, "wrong-password"), "not-"+password)
		q := harness.StartService(t, "query", env)
		readyzFails(t, q, "redis", "WRONGPASS")
		noSecretInOutput(t, []string{password, "not-" + password}, q)
	})
	t.Run("settings that do not load stop the service", func(t *testing.T) {
		env := withEnv(harness.StackEnv(), redisEnv)
		env["PULSE_REDIS_TLS_CA_FILE"] = filepath.Join(dir, "no-such-ca.pem")
		stopsAtStart(t, "aggregator", env, "PULSE_REDIS_TLS_CA_FILE: open "+env["PULSE_REDIS_TLS_CA_FILE"], password)
		env = withEnv(harness.StackEnv(), redisEnv)
		env["PULSE_REDIS_PASSWORD"] = password // and PULSE_REDIS_PASSWORD_FILE
		stopsAtStart(t, "query", env, "PULSE_REDIS_PASSWORD and PULSE_REDIS_PASSWORD_FILE: set one, not both", password)
	})
}

// discard is a logger for clients whose logs the tests do not read.
var discard = slog.New(slog.DiscardHandler)

// pingKafka makes a client of cfg and sends it a metadata request.
func pingKafka(ctx context.Context, cfg kafkax.Config) error {
	cl, err := kafkax.NewClient(cfg, discard, nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	return kafkax.Ping(ctx, cl)
}

// privateKafka is a one-node KRaft broker of a test, with two client listeners: one
// SASL_SSL (SCRAM) and one SSL asking for client certificates. Brokers talk to each
// other over the SSL listener too, so no port of it speaks plain TCP but the
// controller's.
type privateKafka struct {
	saslAddr, mtlsAddr string
}

// startTLSKafka formats and starts the broker from the stack's Kafka jars, with the
// SCRAM users of users (name → password, for both SCRAM mechanisms).
func startTLSKafka(t *testing.T, dir string, certs *backendCerts, users map[string]string) *privateKafka {
	t.Helper()
	lib := jarDir(t, "kafka")
	sasl, mtls, ctrl := harness.FreePort(t), harness.FreePort(t), harness.FreePort(t)
	k := &privateKafka{saslAddr: fmt.Sprintf("127.0.0.1:%d", sasl), mtlsAddr: fmt.Sprintf("127.0.0.1:%d", mtls)}
	props := filepath.Join(dir, "server.properties")
	lines := []string{
		"process.roles=broker,controller",
		"node.id=1",
		fmt.Sprintf("controller.quorum.voters=1@127.0.0.1:%d", ctrl),
		fmt.Sprintf("listeners=SASL_SSL://%s,SSL://%s,CONTROLLER://127.0.0.1:%d", k.saslAddr, k.mtlsAddr, ctrl),
		fmt.Sprintf("advertised.listeners=SASL_SSL://%s,SSL://%s", k.saslAddr, k.mtlsAddr),
		"controller.listener.names=CONTROLLER",
		"inter.broker.listener.name=SSL",
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL",
		"log.dirs=" + filepath.Join(dir, "log"),
		"offsets.topic.replication.factor=1",
		"transaction.state.log.replication.factor=1",
		"transaction.state.log.min.isr=1",
		"default.replication.factor=1",
		"min.insync.replicas=1",
		"auto.create.topics.enable=false",
		"group.initial.rebalance.delay.ms=0",
		"num.partitions=2",
		// PEM key store (key, then chain) and trust store: no keytool needed.
		"ssl.keystore.type=PEM",
		"ssl.keystore.location=" + certs.serverKeystore,
		"ssl.truststore.type=PEM",
		"ssl.truststore.location=" + certs.caFile,
		"listener.name.ssl.ssl.client.auth=required",
		"sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
		"listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;",
		"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;",
	}
	if err := os.WriteFile(props, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log4j, err := filepath.Abs(filepath.Join("..", "deploy", "local", "kafka", "log4j.properties"))
	if err != nil {
		t.Fatal(err)
	}
	format := []string{"java", "-cp", lib + "/*", "-Dlog4j.configuration=file:" + log4j,
		"kafka.tools.StorageTool", "format", "-t", "cHVsc2UtdGxzLXRlc3QtMQ", "-c", props}
	for name, pw := range users {
		for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
			format = append(format, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", mech, name, pw))
		}
	}
	if out, err := exec.Command(format[0], format[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("formatting the broker's storage: %v\n%s", err, out)
	}
	p := startServerProc(t, "kafka (SASL_SSL)", filepath.Join(dir, "kafka.log"),
		"java", "-Xms256m", "-Xmx256m", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
		"-Dlog4j.configuration=file:"+log4j, "-Dkafka.logs.dir="+filepath.Join(dir, "logs"),
		"-cp", lib+"/*", "kafka.Kafka", props)
	var name, pw string
	for name, pw = range users {
		break
	}
	probe := kafkax.Config{Brokers: []string{k.saslAddr}, ClientID: "pulse-tls-test", DialTimeout: 2 * time.Second,
		RequestTimeout: 5 * time.Second, RetryTimeout: 2 * time.Second,
		TLS: config.ClientTLS{CAFile: certs.caFile}, SASL: kafkax.SASL{Username: name, Password: pw}}
	p.waitReady(t, 3*time.Minute, func(ctx context.Context) error { return pingKafka(ctx, probe) })
	return k
}

// Kafka over SASL_SSL with SCRAM, and over mutual TLS: ingest, aggregator and query
// carry an event through a broker that has no plain client port, as a SCRAM user whose
// password comes from a file; pulsectl creates the topics and waits for the brokers
// through the same variables. A plain client, a TLS client without SASL, a wrong
// password and a client without certificate on the mutual-TLS listener are refused,
// the wrong password with Kafka's authentication error named on ingest's /readyz.
func TestBackendTLSKafka(t *testing.T) {
	dir := t.TempDir()
	certs := newBackendCerts(t, dir)
	password := "kafka-" + harness.RandomID(t) + harness.RandomID(t)
	k := startTLSKafka(t, dir, certs, map[string]string{"pulse": password})
	kafkaEnv := map[string]string{
		"PULSE_KAFKA_BROKERS":            k.saslAddr,
		"PULSE_KAFKA_TLS_CA_FILE":        certs.caFile,
		"PULSE_KAFKA_SASL_MECHANISM":     "SCRAM-SHA-256",
		"PULSE_KAFKA_SASL_USERNAME":      "pulse",
		"PULSE_KAFKA_SASL_PASSWORD_FILE": writeSecret(t, filepath.Join(dir, "kafka-password"), password),
	}

	t.Run("pulsectl and pipeline", func(t *testing.T) {
		if out, err := runPulsectl(t, kafkaEnv, "topics", "-brokers", k.saslAddr, "-partitions", "2"); err != nil {
			t.Fatalf("pulsectl topics over SASL_SSL: %v\n%s", err, out)
		}
		if out, err := runPulsectl(t, kafkaEnv, "wait", "-timeout", "20s", "-kafka", k.saslAddr); err != nil {
			t.Fatalf("pulsectl wait -kafka over SASL_SSL: %v\n%s", err, out)
		}
		run := harness.RandomID(t)
		env := withEnv(harness.StackEnv(), kafkaEnv)
		for k, v := range map[string]string{
			"PULSE_AGGREGATOR_GROUP": "tls-" + run + "-aggregator",
			"PULSE_REDIS_PREFIX":     "tls-" + run,
			"PULSE_OFFLINE_AFTER":    "24h",
			"PULSE_IDLE_AFTER":       "24h",
		} {
			env[k] = v
		}
		svc := map[string]*harness.Service{}
		for _, name := range []string{"aggregator", "ingest", "query"} {
			svc[name] = harness.StartService(t, name, env)
			harness.Eventually(t, 60*time.Second, func() string {
				if code, body := harness.Get(t, svc[name].URL+"/readyz"); code != http.StatusOK {
					return fmt.Sprintf("%s /readyz = %d %s", name, code, body)
				}
				return ""
			})
		}
		postOnlineAndWait(t, svc["ingest"], svc["query"], "tls-kafka-"+run)
		noSecretInOutput(t, []string{password}, svc["aggregator"], svc["ingest"], svc["query"])
	})

	base := kafkax.Config{ClientID: "pulse-tls-test", DialTimeout: 2 * time.Second, RequestTimeout: 3 * time.Second, RetryTimeout: 3 * time.Second}
	refused := func(t *testing.T, cfg kafkax.Config) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		err := pingKafka(ctx, cfg)
		if err == nil {
			t.Fatalf("%v: metadata answered; want it refused", cfg)
		}
		return err
	}
	t.Run("mutual TLS", func(t *testing.T) {
		cfg := base
		cfg.Brokers = []string{k.mtlsAddr}
		cfg.TLS = config.ClientTLS{CAFile: certs.caFile, CertFile: certs.clientCert, KeyFile: certs.clientKey}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := pingKafka(ctx, cfg); err != nil {
			t.Fatalf("with a client certificate: %v", err)
		}
		cfg.TLS = config.ClientTLS{CAFile: certs.caFile}
		t.Logf("no client certificate: %v", refused(t, cfg))
	})
	t.Run("plain client refused", func(t *testing.T) {
		cfg := base
		cfg.Brokers = []string{k.saslAddr}
		cfg.SASL = kafkax.SASL{Username: "pulse", Password: password}
		t.Logf("plain with SASL: %v", refused(t, cfg))
		cfg.SASL, cfg.TLS = kafkax.SASL{}, config.ClientTLS{CAFile: certs.caFile}
		t.Logf("TLS without SASL: %v", refused(t, cfg))
	})
	t.Run("wrong password refused", func(t *testing.T) {
		cfg := base
		cfg.Brokers = []string{k.saslAddr}
		cfg.TLS = config.ClientTLS{CAFile: certs.caFile}
		cfg.SASL = kafkax.SASL{Mechanism: "SCRAM-SHA-512", Username: "pulse", Password: "not-" + password}
		err := refused(t, cfg)
		if !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
			t.Fatalf("wrong password: %v, want SASL_AUTHENTICATION_FAILED", err)
		}
		t.Logf("wrong password: %v", err)
		env := withEnv(harness.StackEnv(), kafkaEnv)
		env["PULSE_KAFKA_SASL_PASSWORD_FILE"] = writeSecret(t, filepath.Join(dir, "wrong-password"), "not-"+password)
		in := harness.StartService(t, "ingest", env)
		readyzFails(t, in, "kafka", "SASL_AUTHENTICATION_FAILED")
		noSecretInOutput(t, []string{password, "not-" + password}, in)
	})
	t.Run("settings that do not load stop the service", func(t *testing.T) {
		env := withEnv(harness.StackEnv(), kafkaEnv)
		delete(env, "PULSE_KAFKA_SASL_PASSWORD_FILE")
		stopsAtStart(t, "ingest", env, "needs PULSE_KAFKA_SASL_PASSWORD or PULSE_KAFKA_SASL_PASSWORD_FILE", password)
		env = withEnv(harness.StackEnv(), kafkaEnv)
		env["PULSE_KAFKA_TLS_CERT_FILE"] = certs.clientCert // without its key
		stopsAtStart(t, "history", env, "PULSE_KAFKA_TLS_CERT_FILE and PULSE_KAFKA_TLS_KEY_FILE: set both", password)
	})
}

// startTLSCassandra starts a private one-node Cassandra from the stack's jars and its
// configuration, with client_encryption_options enabled and not optional (the CQL port
// speaks only TLS) and PasswordAuthenticator; it returns the CQL port once the default
// superuser can log in over TLS. It costs 15-30 s on an idle 2-core machine (minutes on
// a saturated one) and 512 MiB of heap.
func startTLSCassandra(t *testing.T, dir string, certs *backendCerts) int {
	t.Helper()
	lib := jarDir(t, "cassandra")
	local, err := filepath.Abs(filepath.Join("..", "deploy", "local", "cassandra"))
	if err != nil {
		t.Fatal(err)
	}
	jamm, _ := filepath.Glob(filepath.Join(lib, "jamm-*.jar"))
	if len(jamm) == 0 {
		t.Fatalf("no jamm jar in %s", lib)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cql, storage := harness.FreePort(t), harness.FreePort(t)
	tmpl, err := os.ReadFile(filepath.Join(local, "cassandra.yaml.in"))
	if err != nil {
		t.Fatal(err)
	}
	yaml := strings.NewReplacer(
		"@CQL_PORT@", strconv.Itoa(cql), "@STORAGE_PORT@", strconv.Itoa(storage), "@DATA_DIR@", dir,
		"cluster_name: pulse-local", "cluster_name: pulse-tls-test",
		"authenticator: AllowAllAuthenticator", "authenticator: PasswordAuthenticator",
	).Replace(string(tmpl))
	if !strings.Contains(yaml, "authenticator: PasswordAuthenticator") || !strings.Contains(yaml, "cluster_name: pulse-tls-test") {
		t.Fatalf("%s/cassandra.yaml.in changed: no authenticator or cluster_name line to replace", local)
	}
	yaml += strings.Join([]string{
		"",
		"client_encryption_options:",
		"  enabled: true",
		"  optional: false",
		"  ssl_context_factory:",
		"    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory",
		"  keystore: " + certs.serverKeystore,
		"  require_client_auth: false",
		"",
	}, "\n")
	yamlFile := filepath.Join(dir, "cassandra.yaml")
	if err := os.WriteFile(yamlFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(local, "jvm.options"))
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{"nice", "-n", "10", "java"}
	for _, line := range strings.Split(string(raw), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			argv = append(argv, line)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	argv = append(argv, "-Xms512m", "-Xmx512m", "-javaagent:"+jamm[0],
		"-Djava.io.tmpdir="+filepath.Join(dir, "tmp"),
		"-Dcassandra-foreground=yes",
		"-Dcassandra.config=file://"+yamlFile,
		"-Dcassandra.storagedir="+dir,
		"-Dcassandra.logdir="+filepath.Join(dir, "logs"),
		"-Dlogback.configurationFile="+filepath.Join(local, "logback.xml"),
		"-Dcassandra.skip_wait_for_gossip_to_settle=0",
		"-Dcassandra.ring_delay_ms=1000",
		"-Dcassandra.skip_sync=true", "-Dcassandra.unsafesystem=true",
		// The default superuser is made at once rather than after ten seconds.
		"-Dcassandra.superuser_setup_delay_ms=0",
		"-cp", lib+"/*", "org.apache.cassandra.service.CassandraDaemon")
	p := startServerProc(t, "cassandra (TLS)", filepath.Join(dir, "cassandra.log"), argv...)
	p.waitReady(t, 4*time.Minute, func(ctx context.Context) error {
		s, err := cassx.NewSession(cassx.Config{Hosts: []string{"127.0.0.1"}, Port: cql, Consistency: "ONE",
			Username: "cassandra", Password: "cassandra", Timeout: 5 * time.Second, ConnectTimeout: 2 * time.Second,
			TLS: config.ClientTLS{CAFile: certs.caFile}})
		if err != nil {
			return err
		}
		defer s.Close()
		return cassx.Ping(ctx, s)
	})
	return cql
}

// Cassandra over TLS with a password: pulsectl migrates a node whose CQL port speaks
// only TLS, history writes an event ingest took into it as a role whose password comes
// from a file, and query reads it back on the operator's timeline. A plain client and
// a wrong password are refused, the latter stopping history at start with Cassandra's
// reason.
func TestBackendTLSCassandra(t *testing.T) {
	dir := t.TempDir()
	certs := newBackendCerts(t, dir)
	port := startTLSCassandra(t, filepath.Join(dir, "node"), certs)
	password := "cassandra-" + harness.RandomID(t) + harness.RandomID(t)
	tlsOnly := config.ClientTLS{CAFile: certs.caFile}
	admin, err := cassx.NewSession(cassx.Config{Hosts: []string{"127.0.0.1"}, Port: port, Consistency: "ONE",
		Username: "cassandra", Password: "cassandra", Timeout: 30 * time.Second, TLS: tlsOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := admin.Query(`CREATE ROLE pulse WITH PASSWORD = '` + password + `' AND LOGIN = true AND SUPERUSER = true`).
		ExecContext(ctx); err != nil {
		t.Fatalf("creating the pulse role: %v", err)
	}
	migrations, err := filepath.Abs(filepath.Join("..", "migrations"))
	if err != nil {
		t.Fatal(err)
	}
	// pulsectl migrate takes the password from PULSE_CASSANDRA_PASSWORD and TLS from the
	// shared variables, which its flags do not cover.
	if out, err := runPulsectl(t, map[string]string{"PULSE_CASSANDRA_PASSWORD": password, "PULSE_CASSANDRA_TLS_CA_FILE": certs.caFile},
		"migrate", "-hosts", "127.0.0.1", "-port", strconv.Itoa(port), "-keyspace", "pulse", "-username", "pulse",
		"-dir", migrations, "-timeout", "60s"); err != nil {
		t.Fatalf("pulsectl migrate over TLS: %v\n%s", err, out)
	}
	cassEnv := map[string]string{
		"PULSE_CASSANDRA_HOSTS":         "127.0.0.1",
		"PULSE_CASSANDRA_PORT":          strconv.Itoa(port),
		"PULSE_CASSANDRA_KEYSPACE":      "pulse",
		"PULSE_CASSANDRA_USERNAME":      "pulse",
		"PULSE_CASSANDRA_PASSWORD_FILE": writeSecret(t, filepath.Join(dir, "cassandra-password"), password),
		"PULSE_CASSANDRA_TLS_CA_FILE":   certs.caFile,
	}

	t.Run("pipeline", func(t *testing.T) {
		p := harness.NewTopics(t, 2)
		p.Env = withEnv(p.Env, cassEnv)
		for _, name := range []string{"aggregator", "history", "ingest", "query"} {
			p.Start(t, name)
		}
		user := "tls-cassandra-" + p.Run
		postOnlineAndWait(t, p.Svc["ingest"], p.Svc["query"], user)
		day := time.Now().UTC().Format("2006-01-02")
		next := time.Now().UTC().AddDate(0, 0, 1).Format("2006-01-02")
		url := p.Svc["query"].URL + "/v1/users/" + user + "/timeline?from=" + day + "&to=" + next + "&view=operator"
		harness.Eventually(t, 60*time.Second, func() string {
			req, err := http.NewRequest(http.MethodGet, url, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+harness.TestKeys.Operator)
			res, err := harness.KeyedClient.Do(req)
			if err != nil {
				return err.Error()
			}
			defer res.Body.Close()
			var page struct {
				Entries []struct {
					Type   string `json:"type"`
					Status string `json:"status"`
				} `json:"entries"`
			}
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusOK || json.Unmarshal(body, &page) != nil || len(page.Entries) == 0 {
				return fmt.Sprintf("GET %s = %d %s", url, res.StatusCode, body)
			}
			return ""
		})
		// The rows are in the private node's table, which only TLS reaches.
		var n int
		if err := admin.Query(`SELECT count(*) FROM pulse.user_activity WHERE user_id = ? AND bucket = ?`, user,
			time.Now().UTC().Truncate(24*time.Hour)).ScanContext(ctx, &n); err != nil || n == 0 {
			t.Fatalf("user_activity rows of %s on the TLS node: %d, %v", user, n, err)
		}
		noSecretInOutput(t, []string{password}, p.Svc["history"], p.Svc["query"])
	})

	t.Run("plain client refused", func(t *testing.T) {
		s, err := cassx.NewSession(cassx.Config{Hosts: []string{"127.0.0.1"}, Port: port, Username: "pulse", Password: password,
			Timeout: 3 * time.Second, ConnectTimeout: 3 * time.Second})
		if err == nil {
			s.Close()
			t.Fatal("a plain session connected; want it refused")
		}
		t.Logf("plain: %v", err)
	})
	t.Run("wrong password refused", func(t *testing.T) {
		s, err := cassx.NewSession(cassx.Config{Hosts: []string{"127.0.0.1"}, Port: port, Username: "pulse", Password: "not-" + password,
			Timeout: 3 * time.Second, ConnectTimeout: 3 * time.Second, TLS: tlsOnly})
		if err == nil {
			s.Close()
			t.Fatal("a session with a wrong password connected; want it refused")
		}
		if !strings.Contains(err.Error(), "password are incorrect") {
			t.Fatalf("wrong password: %v, want Cassandra's \"password are incorrect\"", err)
		}
		t.Logf("wrong password: %v", err)
		env := withEnv(harness.NewTopics(t, 2).Env, cassEnv)
		env["PULSE_CASSANDRA_PASSWORD_FILE"] = writeSecret(t, filepath.Join(dir, "wrong-password"), "not-"+password)
		stopsAtStart(t, "history", env, "password are incorrect", password)
	})
}
