package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pulse-presence/pulse/cmd/internal/eventgen"
	"github.com/pulse-presence/pulse/cmd/internal/trust"
)

// class is how a request ended.
type class int

const (
	classOK        class = iota // 2xx
	class4xx                    // any other answer below 500: in practice 4xx
	class5xx                    // 5xx
	classTransport              // no usable answer: connection error, timeout, unreadable body
	classDropped                // never sent: no free worker (or, for probes, the probe user was busy)
	classAborted                // cut off by the shutdown after Ctrl-C; counted apart, not as an error
)

// outcome is what one request (one scheduled unit of a workload) reports.
type outcome struct {
	class  class
	code   int       // HTTP status, 0 without one
	events int       // events the server accepted (ingest workloads, 2xx only)
	end    time.Time // when the answer was read in full; latency is end − intended start
	fresh  *probeResult
}

// probeResult is what a freshness probe learned after its write was accepted.
type probeResult struct {
	seen       bool          // a read showed the posted status
	after      time.Duration // from the write's 2xx to the end of that read
	timedOut   bool
	aborted    bool
	polls      int
	pollErrors int
}

// workload is one stream of requests with its own rate.
type workload struct {
	name     string
	endpoint string  // method and path, for the report
	rate     float64 // target requests per second
	perReq   int     // events each request carries (ingest workloads), for the target events/s
	salt     uint64  // keeps the workloads' random streams apart under one -seed
	do       func(ctx context.Context, rng *rand.Rand, seq uint64) outcome
}

// requestRand returns the random stream of one request: a function of the seed, the
// workload and the request's number only, so a rerun with the same -seed sends the
// same users, devices, statuses and kinds however the goroutines interleave.
func requestRand(seed, salt, seq uint64) *rand.Rand {
	return rand.New(rand.NewPCG(eventgen.Splitmix(seed+salt*0x9e3779b97f4a7c15), eventgen.Splitmix(seq)))
}

// client drives Pulse's HTTP API.
type client struct {
	http    *http.Client
	ingest  string // base URLs, no trailing slash
	query   string
	timeout time.Duration
	// ingestAuth and queryAuth are the Authorization headers of each service ("" for none).
	ingestAuth, queryAuth string
	// acks counts every ingest request's events and writes the acknowledged ones.
	acks *ledger
}

func newClient(cfg config) (*client, error) {
	tc, err := trust.Config(cfg.caFile)
	if err != nil {
		return nil, fmt.Errorf("-ca: %w", err)
	}
	tr := &http.Transport{
		TLSClientConfig:     tc,
		Proxy:               nil, // a load test measures Pulse, never a proxy in between
		DialContext:         (&net.Dialer{Timeout: cfg.timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        2 * cfg.workers,
		MaxIdleConnsPerHost: cfg.workers,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &client{
		http:       &http.Client{Transport: tr},
		ingest:     strings.TrimRight(cfg.ingestURL, "/"),
		query:      strings.TrimRight(cfg.queryURL, "/"),
		timeout:    cfg.timeout,
		ingestAuth: bearer(cfg.producerKey),
		queryAuth:  bearer(cfg.readerKey),
	}, nil
}

func bearer(key string) string {
	if key == "" {
		return ""
	}
	return "Bearer " + key
}

// call sends one request under the -timeout and, on a 2xx, decodes the answer into
// into (when not nil). Every answer is read to the end so its connection is reused.
func (c *client) call(ctx context.Context, method, url string, body any, into any) outcome {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			// Not with the body types below; were it to happen, it shows as transport errors.
			return outcome{class: classTransport, end: time.Now()}
		}
		rd = bytes.NewReader(b)
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, method, url, rd)
	if err != nil {
		return outcome{class: classTransport, end: time.Now()}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	auth := c.queryAuth
	if strings.HasPrefix(url, c.ingest+"/") {
		auth = c.ingestAuth
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.failed(ctx)
	}
	defer resp.Body.Close()
	o := outcome{code: resp.StatusCode}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		o.class = classOK
	case resp.StatusCode >= 500:
		o.class = class5xx
	default:
		o.class = class4xx
	}
	if o.class == classOK && into != nil {
		err = json.NewDecoder(resp.Body).Decode(into)
	}
	if _, cerr := io.Copy(io.Discard, resp.Body); err == nil {
		err = cerr
	}
	if err != nil {
		f := c.failed(ctx)
		f.code = resp.StatusCode
		return f
	}
	o.end = time.Now()
	return o
}

// postEvents sends events to ingest's path as body, decoding a 2xx answer into
// answer, and records them in c.acks under workload: acknowledged ones with the ids
// ids returns from the decoded answer.
func (c *client) postEvents(ctx context.Context, workload, path string, body any, events []eventgen.Event, answer any, ids func() []string) outcome {
	o := c.call(ctx, http.MethodPost, c.ingest+path, body, answer)
	var got []string
	if o.class == classOK {
		o.events = len(events)
		got = ids()
	}
	c.acks.record(workload, o, events, got)
	return o
}

// failed classifies a request that got no usable answer: the shutdown's abort is
// not the server's fault; anything else (the -timeout included) is.
func (c *client) failed(ctx context.Context) outcome {
	if ctx.Err() != nil {
		return outcome{class: classAborted, end: time.Now()}
	}
	return outcome{class: classTransport, end: time.Now()}
}

// The HTTP API's bodies, as far as the load generator writes or reads them.
type (
	statusBody struct {
		UserID string `json:"userId"`
		Status string `json:"status"`
	}
	eventsBody struct {
		Events []eventgen.Event `json:"events"`
	}
	eventsAnswer struct {
		Accepted int      `json:"accepted"`
		EventIDs []string `json:"eventIds"`
	}
	heartbeatAnswer struct {
		EventID string `json:"eventId"`
	}
	heartbeatBody struct {
		UserID   string `json:"userId"`
		DeviceID string `json:"deviceId"`
	}
	userIDsBody struct {
		UserIDs []string `json:"userIds"`
	}
	statusAnswer struct {
		UserID string `json:"userId"`
		Status string `json:"status"`
	}
)

// buildWorkloads returns the workloads whose rate is not 0, in report order. The
// freshness probe reads its users' current statuses first, so it needs the query API.
func buildWorkloads(ctx context.Context, cfg config, c *client) ([]*workload, error) {
	g := eventgen.Gen{Prefix: cfg.userPrefix, Users: cfg.users, Devices: cfg.devices, Kinds: cfg.mix}
	all := []*workload{
		{name: "single", endpoint: "POST /status", rate: cfg.singleRate, perReq: 1,
			do: func(ctx context.Context, rng *rand.Rand, _ uint64) outcome {
				b := statusBody{UserID: g.User(rng), Status: eventgen.Status(rng)}
				// The seed API's answer names no event id.
				return c.postEvents(ctx, "single", "/status", b, []eventgen.Event{{UserID: b.UserID, Kind: "status", Status: b.Status}},
					nil, func() []string { return nil })
			}},
		{name: "batch", endpoint: "POST /v1/events", rate: cfg.batchRate, perReq: cfg.batchSize,
			do: func(ctx context.Context, rng *rand.Rand, _ uint64) outcome {
				b := eventsBody{Events: make([]eventgen.Event, cfg.batchSize)}
				for i := range b.Events {
					b.Events[i] = g.Event(rng)
				}
				var a eventsAnswer
				o := c.postEvents(ctx, "batch", "/v1/events", b, b.Events, &a, func() []string { return a.EventIDs })
				if o.class == classOK {
					o.events = a.Accepted
				}
				return o
			}},
		{name: "heartbeat", endpoint: "POST /v1/heartbeat", rate: cfg.heartbeatRate, perReq: 1,
			do: func(ctx context.Context, rng *rand.Rand, _ uint64) outcome {
				b := heartbeatBody{UserID: g.User(rng), DeviceID: g.Device(rng)}
				var a heartbeatAnswer
				return c.postEvents(ctx, "heartbeat", "/v1/heartbeat", b, []eventgen.Event{{UserID: b.UserID, DeviceID: b.DeviceID, Kind: "heartbeat"}},
					&a, func() []string { return []string{a.EventID} })
			}},
		{name: "read", endpoint: "GET /status/{id}", rate: cfg.readRate,
			do: func(ctx context.Context, rng *rand.Rand, _ uint64) outcome {
				return c.call(ctx, http.MethodGet, c.query+"/status/"+url.PathEscape(g.User(rng)), nil, nil)
			}},
		{name: "batch-read", endpoint: "POST /statuses", rate: cfg.batchReadRate,
			do: func(ctx context.Context, rng *rand.Rand, _ uint64) outcome {
				return c.call(ctx, http.MethodPost, c.query+"/statuses", userIDsBody{UserIDs: g.UserList(rng, cfg.readBatchSize)}, nil)
			}},
		{name: "detail", endpoint: "GET /v1/users/{id}/status", rate: cfg.detailRate,
			do: func(ctx context.Context, rng *rand.Rand, _ uint64) outcome {
				return c.call(ctx, http.MethodGet, c.query+"/v1/users/"+url.PathEscape(g.User(rng))+"/status", nil, nil)
			}},
		{name: "count", endpoint: "GET /v1/online/count", rate: cfg.countRate,
			do: func(ctx context.Context, _ *rand.Rand, _ uint64) outcome {
				return c.call(ctx, http.MethodGet, c.query+"/v1/online/count", nil, nil)
			}},
		{name: "filter", endpoint: "POST /v1/online/filter", rate: cfg.filterRate,
			do: func(ctx context.Context, rng *rand.Rand, _ uint64) outcome {
				return c.call(ctx, http.MethodPost, c.query+"/v1/online/filter", userIDsBody{UserIDs: g.UserList(rng, cfg.readBatchSize)}, nil)
			}},
	}
	if cfg.freshRate > 0 {
		p, err := newProber(ctx, cfg, c)
		if err != nil {
			return nil, err
		}
		all = append(all, &workload{name: "fresh", endpoint: "POST /v1/events + GET /status/{id}", rate: cfg.freshRate, perReq: 1, do: p.probe})
	}
	var on []*workload
	for i, w := range all {
		w.salt = uint64(i + 1)
		if w.rate > 0 {
			on = append(on, w)
		}
	}
	return on, nil
}

// prober measures freshness: how long after ingest acknowledged a status change a
// reader first sees it. Each probe flips one probe user's status to one it does not
// have, so the first read that shows it cannot be showing an older state.
type prober struct {
	c       *client
	users   []probeUser
	poll    time.Duration
	timeout time.Duration
}

// probeUser is one user of the "lg-probe-<n>" range. Probes take users round-robin;
// busy keeps two probes off one user, and it also guards status and dirty.
type probeUser struct {
	id     string
	busy   atomic.Bool
	status string // what a reader last saw or we last set
	dirty  bool   // a write may or may not have landed: read before the next flip
}

// probeReuse is how long before a probe user is used again, and so how many probe
// users a rate needs. It is far above a probe's longest life (-timeout plus
// -fresh-timeout by default) yet below the aggregator's 60 s device timeout, which
// could otherwise turn a user we set online offline behind our back.
const probeReuse = 30 * time.Second

func newProber(ctx context.Context, cfg config, c *client) (*prober, error) {
	n := cfg.probeUsers
	if n == 0 {
		n = max(1, int(cfg.freshRate*probeReuse.Seconds()+0.5))
	}
	p := &prober{c: c, users: make([]probeUser, n), poll: cfg.freshPoll, timeout: cfg.freshTimeout}
	for i := range p.users {
		p.users[i].id = cfg.userPrefix + "probe-" + strconv.Itoa(i)
	}
	// Learn where every probe user stands, in batches the query API accepts.
	const batch = 1000
	for lo := 0; lo < n; lo += batch {
		hi := min(lo+batch, n)
		ids := make([]string, 0, hi-lo)
		for i := lo; i < hi; i++ {
			ids = append(ids, p.users[i].id)
		}
		var a struct {
			Statuses []statusAnswer `json:"statuses"`
		}
		o := c.call(ctx, http.MethodPost, c.query+"/statuses", userIDsBody{UserIDs: ids}, &a)
		if o.class != classOK || len(a.Statuses) != len(ids) {
			return nil, fmt.Errorf("reading the probe users' statuses from %s/statuses: %s", c.query, describe(o))
		}
		for i, s := range a.Statuses {
			p.users[lo+i].status = s.Status
		}
	}
	return p, nil
}

func describe(o outcome) string {
	switch {
	case o.code != 0:
		return "HTTP " + strconv.Itoa(o.code)
	case o.class == classOK:
		return "unexpected answer"
	}
	return "no answer"
}

// probe is one freshness probe; its outcome's latency is that of the write.
func (p *prober) probe(ctx context.Context, _ *rand.Rand, seq uint64) outcome {
	u := &p.users[seq%uint64(len(p.users))]
	if !u.busy.CompareAndSwap(false, true) {
		return outcome{class: classDropped, end: time.Now()}
	}
	defer u.busy.Store(false)

	if u.dirty {
		var a statusAnswer
		if o := p.c.call(ctx, http.MethodGet, p.c.query+"/status/"+url.PathEscape(u.id), nil, &a); o.class != classOK {
			return o
		}
		u.status, u.dirty = a.Status, false
	}
	want := "online"
	if u.status == "online" {
		want = "offline"
	}
	ev := eventsBody{Events: []eventgen.Event{{UserID: u.id, Kind: "status", Status: want, DeviceID: "probe"}}}
	var a eventsAnswer
	o := p.c.postEvents(ctx, "fresh", "/v1/events", ev, ev.Events, &a, func() []string { return a.EventIDs })
	if o.class != classOK {
		u.dirty = true
		return o
	}
	o.events = a.Accepted
	u.status = want
	r := p.await(ctx, u.id, want, o.end)
	o.fresh = &r
	return o
}

// await polls the user's status every p.poll from acked on until it shows want, or
// p.timeout has passed. Polls never overlap: a slow read delays the next one.
func (p *prober) await(ctx context.Context, id, want string, acked time.Time) probeResult {
	var r probeResult
	deadline := acked.Add(p.timeout)
	pctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	next := acked
	for {
		var a statusAnswer
		o := p.c.call(pctx, http.MethodGet, p.c.query+"/status/"+url.PathEscape(id), nil, &a)
		r.polls++
		switch {
		case o.class == classOK && a.Status == want:
			r.seen, r.after = true, o.end.Sub(acked)
			return r
		case ctx.Err() != nil:
			r.aborted = true
			return r
		case !time.Now().Before(deadline):
			r.timedOut = true
			return r
		case o.class != classOK:
			r.pollErrors++
		}
		next = next.Add(p.poll)
		if d := time.Until(next); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-pctx.Done():
				r.aborted = ctx.Err() != nil
				r.timedOut = !r.aborted
				return r
			}
		} else {
			next = time.Now()
		}
	}
}
