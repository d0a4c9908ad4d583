package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/api/openapi"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/shard"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
	"github.com/pulse-presence/pulse/internal/platform/servertest"
	"github.com/pulse-presence/pulse/internal/stores/eventlog"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/services/query/countcache"
	"github.com/pulse-presence/pulse/services/query/online"
)

const testToken = "test-operator-token-0123456789"

// newTestServer is query's HTTP server as run builds it, over store.
func newTestServer(tb testing.TB, store *statestore.Store) *httpserver.Server {
	tb.Helper()
	return newTestServerWith(tb, store, nil)
}

// newTestServerWith is newTestServer with the variables of env set besides (or
// instead of) its own.
func newTestServerWith(tb testing.TB, store *statestore.Store, env map[string]string) *httpserver.Server {
	tb.Helper()
	return newTestServerLogging(tb, store, env, io.Discard)
}

// newTestServerLogging is newTestServerWith logging JSON lines to log.
func newTestServerLogging(tb testing.TB, store *statestore.Store, env map[string]string, log io.Writer) *httpserver.Server {
	tb.Helper()
	vars := map[string]string{
		"PULSE_HTTP_ADDR":      "127.0.0.1:0",
		"PULSE_OPERATOR_TOKEN": testToken,
		// Requests without credentials read in the public view; the routes' guard
		// is tested in internal/api/auth and tests/auth_test.go.
		"PULSE_AUTH": "off",
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := loadConfig(config.NewEnv(config.MapLookup(vars)))
	if err != nil {
		tb.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(log, nil))
	reg := prometheus.NewRegistry()
	srv := httpserver.New(cfg.HTTP, logger, reg)
	installTickets(srv.Echo, installAuth(srv.Echo, newAuth(tb, cfg), reg, logger), auth.NewTickets(memTickets{}, time.Minute, time.Second))
	// Counts read per request (interval 0): tests see every write at once.
	counts := countcache.New(store.Counts, countcache.Config{Timeout: 5 * time.Second}, logger)
	// Single-user reads go through the coalescer, as run has them.
	reads := newCoalescer(store, 5*time.Second, cfg.ReadPipelines, cfg.ReadCoalesce)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reads.Run(ctx) }()
	tb.Cleanup(func() { stop(); <-done })
	a := &api{store: store, get: reads.Get, counts: counts, timeout: 5 * time.Second, maxBatch: cfg.MaxBatch, maxBody: cfg.MaxBody, logger: logger}
	a.routes(srv.Echo)
	// Member events go to a broker that is never there: the tests of the group routes
	// stop before producing.
	kc, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(kc.Close)
	writes := eventlog.NewProducer(kc, "presence.events", time.Second, "pulse_test_produce_seconds", reg)
	a.groupRoutes(srv.Echo, writes)
	a.eraseRoutes(srv.Echo, writes)
	if err := openapi.Register(srv.Echo, "query"); err != nil {
		tb.Fatal(err)
	}
	return srv
}

func newAuth(tb testing.TB, cfg Config) *auth.Authenticator {
	tb.Helper()
	a, err := auth.New(cfg.Auth)
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// offlineStore is a store whose Redis never answers: enough for requests refused
// before any read.
func offlineStore(t *testing.T) *statestore.Store {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 50 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	return statestore.New(rdb, "none")
}

type reply struct {
	code int
	body string
}

func call(tb testing.TB, srv *httpserver.Server, method, target, body string, operator bool) reply {
	tb.Helper()
	return callHandler(tb, srv.Echo, method, target, body, operator)
}

func callHandler(tb testing.TB, h http.Handler, method, target, body string, operator bool) reply {
	tb.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if operator {
		req.Header.Set("Authorization", "Bearer "+testToken)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return reply{rec.Code, strings.TrimSpace(rec.Body.String())}
}

// The OpenAPI document lists exactly the routes query serves.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	srv := newTestServer(t, offlineStore(t))
	if err := openapi.CheckRoutes("query", srv.Echo.Routes()); err != nil {
		t.Fatal(err)
	}
}

func TestParseListQuery(t *testing.T) {
	on, idle, inv := presence.Online, presence.Idle, presence.Invisible
	tests := []struct {
		query    string
		operator bool
		statuses []presence.Status
		limit    int
		within   time.Duration
		field    string
	}{
		{"", false, []presence.Status{on, idle}, 100, 0, ""},
		{"", true, []presence.Status{on, idle, inv}, 100, 0, ""},
		{"status=online&limit=1000", false, []presence.Status{on}, 1000, 0, ""},
		{"status=idle&activeWithin=15m", false, []presence.Status{idle}, 100, 15 * time.Minute, ""},
		{"status=invisible&view=operator", true, []presence.Status{inv}, 100, 0, ""},
		{"activeWithin=24h", false, []presence.Status{on, idle}, 100, 24 * time.Hour, ""},
		{"status=invisible", false, nil, 0, 0, "status"},
		{"status=offline", true, nil, 0, 0, "status"},
		{"limit=0", false, nil, 0, 0, "limit"},
		{"limit=1001", false, nil, 0, 0, "limit"},
		{"limit=ten", false, nil, 0, 0, "limit"},
		{"activeWithin=25h", false, nil, 0, 0, "activeWithin"},
		{"activeWithin=-1m", false, nil, 0, 0, "activeWithin"},
		{"activeWithin=15", false, nil, 0, 0, "activeWithin"},
		{"cursor=nope", false, nil, 0, 0, "cursor"},
		{"active_within=1m", false, nil, 0, 0, "active_within"},
	}
	for _, tt := range tests {
		q, _ := url.ParseQuery(tt.query)
		got, err := parseListQuery(q, tt.operator, nil)
		if tt.field != "" {
			var apiErr *httpserver.Error
			if !asError(err, &apiErr) || apiErr.Status != 400 || apiErr.Field != tt.field {
				t.Errorf("%q: err = %v, want a 400 naming %s", tt.query, err, tt.field)
			}
			continue
		}
		if err != nil || !slices.Equal(got.statuses, tt.statuses) || got.limit != tt.limit || got.activeWithin != tt.within {
			t.Errorf("%q = %+v, %v; want %v limit %d within %v", tt.query, got, err, tt.statuses, tt.limit, tt.within)
		}
	}
}

// A cursor the listing cannot read is a 400 naming it, in the same words whatever is
// wrong with it.
func TestListRefusesBadCursors(t *testing.T) {
	srv := newTestServer(t, offlineStore(t))
	want := `{"error":{"code":"invalid_request","message":"is not a cursor this API returned; send the nextCursor of the previous page, or none","field":"cursor"}}`
	for _, c := range []string{
		"nope",                   // too short
		"AQgDgA-XjM3C",           // a mangled character
		"AQgDgA-XjM3",            // truncated
		"AgQAAIxEv0s",            // another version
		"ATsp10oBKp1ZH3A",        // a change feed cursor
		strings.Repeat("A", 100), // far too long
	} {
		if r := call(t, srv, http.MethodGet, "/v1/online?cursor="+c, "", false); r.code != http.StatusBadRequest || r.body != want {
			t.Errorf("cursor %q: %d %s, want 400 %s", c, r.code, r.body, want)
		}
	}
}

func asError(err error, target **httpserver.Error) bool {
	e, ok := err.(*httpserver.Error)
	*target = e
	return ok
}

func TestFilterRefusesBadInput(t *testing.T) {
	srv := newTestServer(t, offlineStore(t))
	many := make([]string, maxFilterIDs+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	tooMany, _ := json.Marshal(map[string]any{"userIds": many})
	tests := []struct {
		name, body string
		code       int
		field      string
	}{
		{"missing userIds", `{}`, 400, "userIds"},
		{"null userIds", `{"userIds":null}`, 400, "userIds"},
		{"too many", string(tooMany), 400, "userIds"},
		{"empty id", `{"userIds":["a","b","c",""]}`, 400, "userIds[3]"},
		{"id too long", `{"userIds":["` + strings.Repeat("x", 129) + `"]}`, 400, "userIds[0]"},
		{"control character", `{"userIds":["a\u0001"]}`, 400, "userIds[0]"},
		{"unknown field", `{"userIds":[],"friends":true}`, 400, "friends"},
		{"wrong type", `{"userIds":"alice"}`, 400, "userIds"},
		{"not an object", `["alice"]`, 400, "body"},
	}
	for _, tt := range tests {
		r := call(t, srv, http.MethodPost, "/v1/online/filter", tt.body, false)
		var res struct {
			Error httpserver.Error `json:"error"`
		}
		if r.code != tt.code || json.Unmarshal([]byte(r.body), &res) != nil || res.Error.Field != tt.field {
			t.Errorf("%s: %d %.200s, want %d naming %q", tt.name, r.code, r.body, tt.code, tt.field)
		}
	}
	req := httptest.NewRequest(http.MethodPost, "/v1/online/filter", strings.NewReader(`{"userIds":[]}`))
	req.Header.Set("Content-Type", "text/plain")
	rec := httptest.NewRecorder()
	srv.Echo.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain body = %d, want 415", rec.Code)
	}
	huge := `{"userIds":["` + strings.Repeat("x", filterMaxBody) + `"]}`
	if r := call(t, srv, http.MethodPost, "/v1/online/filter", huge, false); r.code != http.StatusRequestEntityTooLarge {
		t.Errorf("a %d-byte body = %d, want 413", len(huge), r.code)
	}
	if r := call(t, srv, http.MethodPost, "/v1/online/filter?view=operator", `{"userIds":[]}`, false); r.code != http.StatusForbidden {
		t.Errorf("operator view without token = %d %s, want 403", r.code, r.body)
	}
}

// ---- against Redis ----

// testStore is a store under a prefix of its own in the Redis of internal/platform/servertest.Redis.
func testStore(tb testing.TB) (*statestore.Store, redis.UniversalClient) {
	tb.Helper()
	rdb, prefix := servertest.Redis(tb, func(cfg *redisx.Config) {
		// Bulk loads send windows of megabytes; a retry after a timed-out write that did
		// land is refused by the offset guard, so the first attempt must have the time.
		cfg.ReadTimeout, cfg.WriteTimeout = 30*time.Second, 30*time.Second
	})
	return statestore.New(rdb, prefix), rdb
}

// testUser is a user as the tests place it in the state.
type testUser struct {
	id         string
	status     presence.Status
	lastActive time.Time
}

// fixture writes users' state the way the aggregator does, shard by shard, and can
// change their statuses later.
type fixture struct {
	tb      testing.TB
	store   *statestore.Store
	shards  int
	offset  []int64
	next    []uint32
	bitmaps [][len(statestore.Tracked)]*roaring.Bitmap
	users   map[string]*presence.User
	// gap, when set, spaces new users' indexes, as offline users between them would.
	gap func() uint32
}

func newFixture(tb testing.TB, store *statestore.Store, shards int) *fixture {
	tb.Helper()
	if err := store.RegisterShards(context.Background(), shards, statestore.DefaultBuckets); err != nil {
		tb.Fatal(err)
	}
	if err := store.MarkWhole(context.Background(), shards); err != nil {
		tb.Fatal(err)
	}
	f := &fixture{tb: tb, store: store, shards: shards, offset: make([]int64, shards), next: make([]uint32, shards),
		bitmaps: make([][len(statestore.Tracked)]*roaring.Bitmap, shards), users: map[string]*presence.User{}}
	for sh := range shards {
		for i := range statestore.Tracked {
			f.bitmaps[sh][i] = roaring.New()
		}
	}
	return f
}

// set gives users their statuses (new users get the next index of their shard), in
// windows of at most chunk users per shard.
func (f *fixture) set(users []testUser, chunk int) {
	f.tb.Helper()
	byShard := make([][]testUser, f.shards)
	for _, u := range users {
		sh := shard.For(u.id, f.shards)
		byShard[sh] = append(byShard[sh], u)
	}
	for sh, us := range byShard {
		for start := 0; start < len(us); start += chunk {
			part := us[start:min(start+chunk, len(us))]
			last := start+chunk >= len(us)
			w := &statestore.Window{Shard: sh, Users: make(map[string]*presence.User, len(part))}
			for _, tu := range part {
				u, ok := f.users[tu.id]
				if !ok {
					u = presence.NewUser(f.next[sh])
					w.NewIDs = append(w.NewIDs, statestore.NewID{UserID: tu.id, Index: f.next[sh]})
					f.next[sh]++
					if f.gap != nil {
						f.next[sh] += f.gap()
					}
					f.users[tu.id] = u
				}
				if p := statestore.TrackedPos(u.Status); p >= 0 {
					f.bitmaps[sh][p].Remove(u.Index)
				}
				u.Status, u.LastActive, u.LastSeen, u.LastUpdated = tu.status, tu.lastActive, tu.lastActive, tu.lastActive
				u.Invisible = tu.status == presence.Invisible
				u.Devices = []presence.Device{{ID: "default", Status: deviceStatus(tu.status), LastSeen: tu.lastActive}}
				if tu.status == presence.Invisible {
					// Invisible since the device connected: readers who are not
					// operators know what they knew before, and not the device.
					u.Devices[0].Hidden = true
				} else {
					u.ResetPublic()
				}
				if p := statestore.TrackedPos(tu.status); p >= 0 {
					f.bitmaps[sh][p].Add(u.Index)
				}
				w.Users[tu.id] = u
			}
			f.offset[sh]++
			w.LastOffset, w.Next = f.offset[sh], f.next[sh]
			w.Bitmaps = f.bitmaps[sh]
			// Bitmaps are written with a shard's last window only: a bulk load then
			// sends each once.
			w.Dirty = [len(statestore.Tracked)]bool{last, last, last}
			if ok, err := f.store.WriteWindow(context.Background(), w); err != nil || !ok {
				f.tb.Fatalf("writing window of shard %d: %v, %v", sh, ok, err)
			}
		}
	}
}

func deviceStatus(st presence.Status) presence.Status {
	if st == presence.Invisible {
		return presence.Online
	}
	return st
}

// walkAll lists every page of query and returns the users in order.
func walkAll(tb testing.TB, srv *httpserver.Server, query string, operator bool, between func(page int)) []onlineUser {
	tb.Helper()
	var all []onlineUser
	cursor := ""
	for page := 0; ; page++ {
		target := "/v1/online?" + query
		if cursor != "" {
			target += "&cursor=" + cursor
		}
		r := call(tb, srv, http.MethodGet, target, "", operator)
		var res onlineList
		if r.code != http.StatusOK || json.Unmarshal([]byte(r.body), &res) != nil || res.Users == nil {
			tb.Fatalf("GET %s = %d %s", target, r.code, r.body)
		}
		all = append(all, res.Users...)
		if res.NextCursor == nil {
			return all
		}
		if page > 100_000 {
			tb.Fatal("the walk does not end")
		}
		cursor = *res.NextCursor
		if between != nil {
			between(page)
		}
	}
}

func randomUsers(rng *rand.Rand, n int, prefix string, now time.Time) []testUser {
	sts := []presence.Status{presence.Online, presence.Online, presence.Idle, presence.Invisible, presence.Offline}
	out := make([]testUser, n)
	for i := range out {
		out[i] = testUser{
			id:         fmt.Sprintf("%s-%d", prefix, i),
			status:     sts[rng.IntN(len(sts))],
			lastActive: now.Add(-time.Duration(rng.IntN(120)) * time.Minute).Truncate(time.Microsecond),
		}
	}
	return out
}

func TestListWalksEveryShard(t *testing.T) {
	store, _ := testStore(t)
	srv := newTestServer(t, store)
	// Before any aggregator registered shards there is nobody.
	if r := call(t, srv, http.MethodGet, "/v1/online", "", false); r.code != 200 || r.body != `{"users":[],"nextCursor":null}` {
		t.Fatalf("empty state: %d %s", r.code, r.body)
	}
	f := newFixture(t, store, 8)
	now := time.Now()
	users := randomUsers(rand.New(rand.NewPCG(1, 2)), 700, "w", now)
	f.set(users, 100)

	want := func(keep func(testUser) bool, operator bool) map[string]string {
		out := map[string]string{}
		for _, u := range users {
			if keep(u) {
				out[u.id] = viewStatus(u.status, operator)
			}
		}
		return out
	}
	present := func(u testUser) bool { return u.status == presence.Online || u.status == presence.Idle }
	tests := []struct {
		query    string
		operator bool
		want     map[string]string
	}{
		{"limit=7", false, want(present, false)},
		{"limit=1000", false, want(present, false)},
		{"", false, want(present, false)},
		{"status=online&limit=13", false, want(func(u testUser) bool { return u.status == presence.Online }, false)},
		{"status=online&limit=13&view=operator", true, want(func(u testUser) bool { return u.status == presence.Online }, true)},
		{"status=idle&limit=50", false, want(func(u testUser) bool { return u.status == presence.Idle }, false)},
		{"limit=9&view=operator", true, want(func(u testUser) bool { return u.status != presence.Offline }, true)},
		{"status=invisible&view=operator", true, want(func(u testUser) bool { return u.status == presence.Invisible }, true)},
		{"limit=11&activeWithin=30m", false, want(func(u testUser) bool { return present(u) && now.Sub(u.lastActive) <= 30*time.Minute }, false)},
	}
	for _, tt := range tests {
		got := walkAll(t, srv, tt.query, tt.operator, nil)
		if len(got) != len(tt.want) {
			t.Errorf("%s: %d users, want %d", tt.query, len(got), len(tt.want))
		}
		seen := map[string]bool{}
		for _, u := range got {
			if seen[u.UserID] || tt.want[u.UserID] != u.Status {
				t.Errorf("%s: %+v listed twice or wrongly (want %q)", tt.query, u, tt.want[u.UserID])
			}
			seen[u.UserID] = true
		}
		// The order is (shard, index): the walk's order.
		for i := 1; i < len(got); i++ {
			a, b := f.users[got[i-1].UserID], f.users[got[i].UserID]
			sa, sb := shard.For(got[i-1].UserID, 8), shard.For(got[i].UserID, 8)
			if sa > sb || sa == sb && a.Index >= b.Index {
				t.Fatalf("%s: %s (shard %d #%d) listed before %s (shard %d #%d)", tt.query, got[i-1].UserID, sa, a.Index, got[i].UserID, sb, b.Index)
			}
		}
	}
	if r := call(t, srv, http.MethodGet, "/v1/online?status=invisible", "", false); r.code != 400 || !strings.Contains(r.body, `"field":"status"`) {
		t.Errorf("public status=invisible = %d %s, want 400", r.code, r.body)
	}
	if r := call(t, srv, http.MethodGet, "/v1/online?view=operator", "", false); r.code != 403 {
		t.Errorf("operator view without token = %d %s, want 403", r.code, r.body)
	}
	other := online.Cursor{Shards: 16, Pos: online.Position{Shard: 3}}.Encode()
	if r := call(t, srv, http.MethodGet, "/v1/online?cursor="+other, "", false); r.code != 400 || !strings.Contains(r.body, "start the walk again") {
		t.Errorf("cursor of another shard count = %d %s, want 400", r.code, r.body)
	}
}

// Users who stay online through a walk are listed exactly once however the others
// change between pages; nobody is ever listed twice.
func TestListWalkIsStableWhileOthersChange(t *testing.T) {
	store, _ := testStore(t)
	srv := newTestServer(t, store)
	f := newFixture(t, store, 4)
	now := time.Now()
	var stable, churn []testUser
	for i := range 400 {
		u := testUser{id: fmt.Sprintf("s-%d", i), status: presence.Online, lastActive: now}
		if i%2 == 1 {
			u.status = presence.Idle
		}
		stable = append(stable, u)
	}
	for i := range 400 {
		churn = append(churn, testUser{id: fmt.Sprintf("c-%d", i), status: presence.Online, lastActive: now})
	}
	f.set(append(slices.Clone(stable), churn...), 1000)

	rng := rand.New(rand.NewPCG(3, 4))
	sts := []presence.Status{presence.Online, presence.Idle, presence.Offline, presence.Invisible}
	fresh := 0
	got := walkAll(t, srv, "limit=25", false, func(int) {
		// Between pages, churning users change and new users appear.
		var change []testUser
		for range 60 {
			u := churn[rng.IntN(len(churn))]
			u.status = sts[rng.IntN(len(sts))]
			change = append(change, u)
		}
		for range 5 {
			change = append(change, testUser{id: fmt.Sprintf("n-%d", fresh), status: presence.Online, lastActive: now})
			fresh++
		}
		f.set(change, 1000)
	})
	count := map[string]int{}
	for _, u := range got {
		count[u.UserID]++
		if count[u.UserID] > 1 {
			t.Errorf("%s listed twice", u.UserID)
		}
	}
	for _, u := range stable {
		if count[u.id] != 1 {
			t.Errorf("%s stayed %s throughout but was listed %d times", u.id, u.status, count[u.id])
		}
	}
	if fresh < 10 {
		t.Fatalf("only %d pages: the walk did not see much change", fresh/5)
	}
}

// With activeWithin a page examines a bounded number of candidates: it may come back
// short, but the walk still finds every match.
func TestListActiveWithinScansInBoundedPages(t *testing.T) {
	store, _ := testStore(t)
	srv := newTestServer(t, store)
	f := newFixture(t, store, 2)
	now := time.Now()
	var users []testUser
	want := map[string]bool{}
	for i := range online.MaxScan + 3000 {
		u := testUser{id: fmt.Sprintf("a-%d", i), status: presence.Online, lastActive: now.Add(-2 * time.Hour)}
		if i%1500 == 7 {
			u.lastActive = now.Add(-time.Minute)
			want[u.id] = true
		}
		users = append(users, u)
	}
	f.set(users, 5000)
	r := call(t, srv, http.MethodGet, "/v1/online?activeWithin=10m&limit=1000", "", false)
	var first onlineList
	if r.code != 200 || json.Unmarshal([]byte(r.body), &first) != nil || first.NextCursor == nil || len(first.Users) >= len(want) {
		t.Fatalf("first page = %d %.300s; want fewer than %d users and a cursor", r.code, r.body, len(want))
	}
	got := walkAll(t, srv, "activeWithin=10m&limit=1000", false, nil)
	if len(got) != len(want) {
		t.Fatalf("walk found %d users, want %d", len(got), len(want))
	}
	for _, u := range got {
		if !want[u.UserID] || u.Status != "online" {
			t.Errorf("listed %+v", u)
		}
	}
}

func TestFilterAnswersFromBitmaps(t *testing.T) {
	store, _ := testStore(t)
	srv := newTestServer(t, store)
	if r := call(t, srv, http.MethodPost, "/v1/online/filter", `{"userIds":["x"]}`, false); r.code != 200 || r.body != `{"online":[]}` {
		t.Fatalf("empty state: %d %s", r.code, r.body)
	}
	f := newFixture(t, store, 8)
	users := randomUsers(rand.New(rand.NewPCG(5, 6)), 3000, "f", time.Now())
	f.set(users, 500)
	rng := rand.New(rand.NewPCG(7, 8))
	var ids []string
	for i := range 5000 {
		if i%4 == 0 {
			ids = append(ids, fmt.Sprintf("unknown-%d", i))
		} else {
			ids = append(ids, users[rng.IntN(len(users))].id)
		}
	}
	body, _ := json.Marshal(map[string]any{"userIds": ids})
	for _, operator := range []bool{false, true} {
		var want []onlineUser
		for _, id := range ids {
			if u, ok := f.users[id]; ok && (u.Status == presence.Online || u.Status == presence.Idle || operator && u.Status == presence.Invisible) {
				want = append(want, onlineUser{UserID: id, Status: u.Status.String()})
			}
		}
		target := "/v1/online/filter"
		if operator {
			target += "?view=operator"
		}
		r := call(t, srv, http.MethodPost, target, string(body), operator)
		var res filterResponse
		if r.code != 200 || json.Unmarshal([]byte(r.body), &res) != nil {
			t.Fatalf("POST %s = %d %.300s", target, r.code, r.body)
		}
		if !slices.Equal(res.Online, want) {
			t.Errorf("operator=%v: %d users, want %d; first difference at %d", operator, len(res.Online), len(want), firstDiff(res.Online, want))
		}
	}
}

func firstDiff(a, b []onlineUser) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Operators see invisible users as they are; everyone else sees them offline, and
// view=operator without the token is refused.
func TestOperatorViewOfStatuses(t *testing.T) {
	store, _ := testStore(t)
	srv := newTestServer(t, store)
	f := newFixture(t, store, 2)
	at := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	f.set([]testUser{{id: "ghost", status: presence.Invisible, lastActive: at}, {id: "alice", status: presence.Online, lastActive: at}}, 10)

	tests := []struct {
		target   string
		operator bool
		code     int
		want     string
	}{
		{"/status/ghost", false, 200, `{"userId":"ghost","status":"offline","lastUpdated":null}`},
		{"/status/ghost?view=operator", true, 200, `{"userId":"ghost","status":"invisible","lastUpdated":"2026-11-22T07:00:00Z"}`},
		{"/status/ghost?view=operator", false, 403, `"code":"forbidden"`},
		{"/status/ghost", true, 200, `"status":"offline"`},
		{"/v1/users/ghost/status", false, 200, `{"userId":"ghost","status":"offline","lastUpdated":null,"lastActive":null,"lastSeen":null,"data":null,"devices":[]}`},
		{"/v1/users/ghost/status?view=operator", true, 200, `{"userId":"ghost","status":"invisible","lastUpdated":"2026-11-22T07:00:00Z","lastActive":"2026-11-22T07:00:00Z","lastSeen":"2026-11-22T07:00:00Z","data":null,"devices":[{"deviceId":"default","status":"online","lastSeen":"2026-11-22T07:00:00Z"}]}`},
		{"/v1/users/ghost/status?view=operator", false, 403, `"code":"forbidden"`},
		{"/v1/users/alice/status?view=operator", true, 200, `"status":"online"`},
		{"/v1/online/count", false, 200, `"total":1,"byStatus":{"idle":0,"offline":1,"online":1},"registered":2,"asOf":"`},
		{"/v1/online/count?view=operator", true, 200, `"total":2,"byStatus":{"idle":0,"invisible":1,"offline":0,"online":1},"registered":2,"asOf":"`},
		{"/v1/online/count?view=operator", false, 403, `"code":"forbidden"`},
		{"/v1/online?view=operator", true, 200, `"status":"invisible"`},
	}
	for _, tt := range tests {
		r := call(t, srv, http.MethodGet, tt.target, "", tt.operator)
		if r.code != tt.code || (tt.want[0] == '{' && r.body != tt.want) || (tt.want[0] != '{' && !strings.Contains(r.body, tt.want)) {
			t.Errorf("GET %s (operator token %v) = %d %s, want %d %s", tt.target, tt.operator, r.code, r.body, tt.code, tt.want)
		}
	}
	r := call(t, srv, http.MethodPost, "/statuses?view=operator", `{"userIds":["ghost","alice"]}`, true)
	if r.code != 200 || !strings.Contains(r.body, `"userId":"ghost","status":"invisible"`) {
		t.Errorf("POST /statuses operator view = %d %s", r.code, r.body)
	}
	if r := call(t, srv, http.MethodGet, "/v1/online", "", false); r.code != 200 || r.body != `{"users":[{"userId":"alice","status":"online"}],"nextCursor":null}` {
		t.Errorf("public listing = %d %s", r.code, r.body)
	}
}

// Without Redis the listing and the filter answer 503 with Retry-After, at once.
func TestOnlineWithoutRedisIsUnavailable(t *testing.T) {
	srv := newTestServer(t, offlineStore(t))
	for _, tc := range []struct{ method, target, body string }{
		{http.MethodGet, "/v1/online", ""},
		{http.MethodPost, "/v1/online/filter", `{"userIds":["a"]}`},
	} {
		req := httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		start := time.Now()
		srv.Echo.ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || time.Since(start) > 2*time.Second {
			t.Errorf("%s %s = %d (Retry-After %q) after %v, want a quick 503 with Retry-After", tc.method, tc.target, rec.Code, rec.Header().Get("Retry-After"), time.Since(start))
		}
	}
}
