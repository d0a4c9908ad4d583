package groups

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/cmd/bench/internal/scale"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
)

// Centrifugo's Redis presence (github.com/centrifugal/centrifuge, presence_redis.go):
// per channel a hash <prefix>.presence.data.<channel> of client id -> the client's
// protocol.ClientInfo (protobuf: user = 1, client = 2), and a sorted set
// <prefix>.presence.expire.<channel> of client id by the Unix second it expires at.
// Without user mapping (presence_user_mapping, off by default) presence_stats runs
// the presence script — ZRANGEBYSCORE for expired clients, then HGETALL of the hash —
// and counts the clients and their distinct users in Centrifugo's process.
const (
	centrifugoPrefix  = "centrifugo" // Centrifugo's default engine prefix
	centrifugoChannel = "bench-room"
)

func centrifugoKeys(channel string) (hash, zset string) {
	return centrifugoPrefix + ".presence.data." + channel, centrifugoPrefix + ".presence.expire." + channel
}

// clientInfo is protocol.ClientInfo{User: user, Client: client} as protobuf.
func clientInfo(user, client string) []byte {
	b := make([]byte, 0, 4+len(user)+len(client))
	b = appendField(b, 1, user)
	return appendField(b, 2, client)
}

// appendField appends a protobuf length-delimited field (wire type 2) of s.
func appendField(b []byte, field int, s string) []byte {
	b = appendVarint(b, uint64(field<<3|2))
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// clientID is entry i's client id, shaped like the UUIDs Centrifugo gives clients.
func clientID(i int) string {
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", uint32(i), uint64(i)*0x9e3779b9&0xffffffffffff)
}

// centrifugoConfig is Centrifugo v6's configuration for the phase: its HTTP API on
// addr with key, the Redis engine at redisAddr, presence on channels without a
// namespace. io_timeout is raised from its 4 s so that a slow call is measured, not
// cut short.
func centrifugoConfig(addr, key, redisAddr string) ([]byte, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(map[string]any{
		"http_server": map[string]any{"address": host, "port": p},
		"http_api":    map[string]any{"key": key},
		"engine": map[string]any{"type": "redis", "redis": map[string]any{
			"address": []string{"redis://" + redisAddr}, "io_timeout": "60s"}},
		"channel": map[string]any{"without_namespace": map[string]any{"presence": true}},
		"log":     map[string]any{"level": "warn"},
	}, "", "  ")
}

// presenceStats is the answer of Centrifugo's server API presence_stats.
type presenceStats struct {
	Result *struct {
		NumClients int `json:"num_clients"`
		NumUsers   int `json:"num_users"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// parsePresenceStats reads presence_stats' answer: its clients and users, or its error.
func parsePresenceStats(b []byte) (clients, users int, err error) {
	var s presenceStats
	if err := json.Unmarshal(b, &s); err != nil {
		return 0, 0, fmt.Errorf("presence_stats answered %q: %w", clip(b), err)
	}
	switch {
	case s.Error != nil:
		return 0, 0, fmt.Errorf("presence_stats: error %d: %s", s.Error.Code, s.Error.Message)
	case s.Result == nil:
		return 0, 0, fmt.Errorf("presence_stats answered no result: %s", clip(b))
	}
	return s.Result.NumClients, s.Result.NumUsers, nil
}

// centrifugo starts a private redis-server and the Centrifugo binary bin on it, writes
// a channel of entries presence entries (each a client of a user of its own) into
// Redis in Centrifugo's format, and times calls calls of presence_stats on it over the
// server HTTP API, after one untimed call, each checked to count every entry.
func centrifugo(ctx context.Context, env *harness.Env, bin string, entries, calls int) (*report.CentrifugoResult, error) {
	res := &report.CentrifugoResult{Binary: bin, Entries: entries,
		Setup: "presence on, presence_user_mapping off (the default), engine io_timeout 60 s"}
	res.Version = centrifugoVersion(ctx, bin)
	rs, err := startRedis(ctx, env)
	if err != nil {
		return nil, err
	}
	defer rs.stop()
	rdb := redisx.NewClient(redisx.Config{Addrs: []string{rs.addr}, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer rdb.Close()
	version, err := redisVersion(ctx, rdb)
	if err != nil {
		return nil, err
	}
	res.Redis = fmt.Sprintf("a private redis-server %s on %s, no persistence", version, rs.addr)

	fmt.Fprintf(env.Out, "    Centrifugo: writing %s presence entries into %s\n", report.Num(float64(entries)), res.Redis)
	if err := fillPresence(ctx, rdb, centrifugoChannel, entries, time.Now().Add(2*time.Hour)); err != nil {
		return nil, err
	}
	hash, zset := centrifugoKeys(centrifugoChannel)
	if res.RedisBytes, err = scale.MemoryOf(ctx, rdb, []string{hash, zset}); err != nil {
		return nil, err
	}
	res.BytesPerEntry = float64(res.RedisBytes) / float64(entries)

	cp, key, err := startCentrifugo(ctx, env, bin, rs.addr)
	if err != nil {
		return nil, err
	}
	defer cp.stop()
	c := &http.Client{Transport: &http.Transport{Proxy: nil}}
	stats := func(int) (time.Duration, error) {
		clients, users, took, err := callPresenceStats(ctx, c, cp.addr, key)
		if err == nil && (clients != entries || users != entries) {
			err = fmt.Errorf("presence_stats counted %d clients and %d users of %d entries", clients, users, entries)
		}
		res.NumClients, res.NumUsers = clients, users
		return took, err
	}
	if res.Ms, err = sequential(ctx, 1, calls, stats); err != nil {
		return nil, err
	}
	return res, nil
}

// callPresenceStats makes one presence_stats call; took is from just before the
// request was sent to the answer's last byte.
func callPresenceStats(ctx context.Context, c *http.Client, addr, key string) (clients, users int, took time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	body, _ := json.Marshal(map[string]string{"channel": centrifugoChannel})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/api/presence_stats", bytes.NewReader(body))
	if err != nil {
		return 0, 0, 0, err
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	t := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("presence_stats: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	took = time.Since(t)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("presence_stats: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, 0, fmt.Errorf("presence_stats: HTTP %d: %s", resp.StatusCode, clip(b))
	}
	clients, users, err = parsePresenceStats(b)
	return clients, users, took, err
}

// fillPresence writes n presence entries of channel, expiring at expireAt, 10,000 per
// pipeline.
func fillPresence(ctx context.Context, rdb redis.UniversalClient, channel string, n int, expireAt time.Time) error {
	hash, zset := centrifugoKeys(channel)
	const perCommand, perPipeline = 1000, 10_000
	for lo := 0; lo < n; lo += perPipeline {
		pipe := rdb.Pipeline()
		for c := lo; c < min(lo+perPipeline, n); c += perCommand {
			fields := make([]any, 0, 2*perCommand)
			members := make([]redis.Z, 0, perCommand)
			for i := c; i < min(c+perCommand, n); i++ {
				id := clientID(i)
				fields = append(fields, id, clientInfo(scale.UserID(i), id))
				members = append(members, redis.Z{Score: float64(expireAt.Unix()), Member: id})
			}
			pipe.HSet(ctx, hash, fields...)
			pipe.ZAdd(ctx, zset, members...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("writing Centrifugo's presence entries: %w", err)
		}
	}
	return nil
}

// startRedis starts a redis-server of the PATH on a free port, without persistence.
func startRedis(ctx context.Context, env *harness.Env) (*proc, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("a private Redis for Centrifugo: %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	p, err := start(env, "centrifugo-redis", addr, bin, []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, nil)
	if err != nil {
		return nil, err
	}
	rdb := redisx.NewClient(redisx.Config{Addrs: []string{addr}})
	defer rdb.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := rdb.Ping(pctx).Err()
		cancel()
		switch {
		case err == nil:
			return p, nil
		case p.exited() || time.Now().After(deadline):
			p.stop()
			return nil, fmt.Errorf("the private redis-server did not answer: %v; see %s", err, p.log)
		}
		select {
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func redisVersion(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	info, err := rdb.InfoMap(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("INFO server: %w", err)
	}
	return info["Server"]["redis_version"], nil
}

// centrifugoVersion is the module version bin was built from (`go install` leaves
// `centrifugo version` at v0.0.0), else what `bin version` prints, else why neither.
func centrifugoVersion(ctx context.Context, bin string) string {
	if bi, err := buildinfo.ReadFile(bin); err == nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Path + " " + bi.Main.Version
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		return "(`version` failed: " + err.Error() + ")"
	}
	return strings.TrimSpace(string(out))
}

// startCentrifugo writes the configuration and starts bin on it, returning once its
// server API answers presence_stats (an empty channel's), with the API key.
func startCentrifugo(ctx context.Context, env *harness.Env, bin, redisAddr string) (*proc, string, error) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	key := hex.EncodeToString(b)
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	conf, err := centrifugoConfig(addr, key, redisAddr)
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(env.RawDir, "groups-centrifugo.json")
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		return nil, "", err
	}
	p, err := start(env, "centrifugo", addr, bin, []string{"--config", path}, nil)
	if err != nil {
		return nil, "", err
	}
	c := &http.Client{Transport: &http.Transport{Proxy: nil}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		body := []byte(`{"channel":"bench-empty"}`)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodPost, "http://"+addr+"/api/presence_stats", bytes.NewReader(body))
		req.Header.Set("X-API-Key", key)
		resp, err := c.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = errors.New(resp.Status)
			}
		}
		cancel()
		switch {
		case err == nil:
			return p, key, nil
		case p.exited() || time.Now().After(deadline):
			p.stop()
			return nil, "", fmt.Errorf("the Centrifugo server API did not answer: %v; see %s", err, p.log)
		}
		select {
		case <-ctx.Done():
			p.stop()
			return nil, "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
