package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/pkg/webhook"
)

// Endpoint is one receiver of webhooks, as the endpoints file describes it
// (docs/webhooks.md).
type Endpoint struct {
	ID     string
	URL    string
	Secret []byte
	// Operator endpoints see what operators see (invisible as invisible); others see
	// invisible as offline and no change a reader could not see.
	Operator bool
	Filter   Filter
	// MaxChanges is the most changes of one batch; MaxWait how long the first change
	// of a batch may wait for others (0: sent at once).
	MaxChanges int
	MaxWait    time.Duration
	// Attempts is the retry budget of a batch, the first attempt included; between
	// attempts the wait doubles from InitialBackoff to MaxBackoff, with jitter, and a
	// Retry-After longer than the wait is honoured up to MaxBackoff.
	Attempts       int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// Timeout bounds one attempt.
	Timeout time.Duration
}

// Filter selects the changes an endpoint receives; an empty list selects every value.
type Filter struct {
	Users    map[string]bool
	Groups   map[string]bool
	Statuses map[presence.Status]bool
	Causes   map[string]bool
	Types    map[string]bool
}

// Change types of a filter: a status transition, a change of the custom status alone,
// a membership change.
const (
	typeStatus = "status"
	typeCustom = "custom"
	typeMember = webhook.TypeMember
)

// Limits and defaults of the endpoints file.
const (
	maxEndpoints        = 100
	minSecretBytes      = 16
	defaultMaxChanges   = 100
	maxMaxChanges       = 1000
	defaultMaxWait      = time.Second
	maxMaxWait          = time.Minute
	defaultAttempts     = 8
	maxAttempts         = 100
	defaultInitial      = time.Second
	defaultMaxBackoff   = time.Minute
	maxBackoffCeiling   = time.Hour
	defaultTimeout      = 10 * time.Second
	maxTimeout          = time.Minute
	minBackoff          = 10 * time.Millisecond
	minTimeout          = 100 * time.Millisecond
	endpointIDMaxLength = 64
)

var endpointIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// fileEndpoint is an endpoint as the file spells it.
type fileEndpoint struct {
	ID     string `json:"id"`
	URL    string `json:"url"`
	Secret string `json:"secret"`
	View   string `json:"view"`
	Filter struct {
		Users    []string `json:"users"`
		Groups   []string `json:"groups"`
		Statuses []string `json:"statuses"`
		Causes   []string `json:"causes"`
		Types    []string `json:"types"`
	} `json:"filter"`
	Batch struct {
		MaxChanges *int     `json:"maxChanges"`
		MaxWait    duration `json:"maxWait"`
	} `json:"batch"`
	Retry struct {
		Attempts       *int     `json:"attempts"`
		InitialBackoff duration `json:"initialBackoff"`
		MaxBackoff     duration `json:"maxBackoff"`
	} `json:"retry"`
	Timeout duration `json:"timeout"`
}

// duration is a Go duration string ("1s", "250ms") in the file; nil when absent.
type duration struct{ d *time.Duration }

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`want a duration string such as "1s"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration: want a string such as \"1s\" or \"250ms\"", s)
	}
	d.d = &v
	return nil
}

func (d duration) or(def time.Duration) time.Duration {
	if d.d == nil {
		return def
	}
	return *d.d
}

// ParseEndpoints reads an endpoints file's content: {"endpoints":[…]}. Every flaw is
// reported, by endpoint, and none of the file is used then.
func ParseEndpoints(raw []byte) ([]*Endpoint, error) {
	var f struct {
		Endpoints []fileEndpoint `json:"endpoints"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not an endpoints file (want {\"endpoints\":[…]}): %w", err)
	}
	if dec.More() {
		return nil, errors.New("content after the endpoints object")
	}
	if len(f.Endpoints) > maxEndpoints {
		return nil, fmt.Errorf("%d endpoints: at most %d", len(f.Endpoints), maxEndpoints)
	}
	var errs []error
	out := make([]*Endpoint, 0, len(f.Endpoints))
	seen := map[string]bool{}
	for i, fe := range f.Endpoints {
		e, err := fe.endpoint()
		if err == nil && seen[e.ID] {
			err = errors.New("id used by an earlier endpoint")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("endpoint %d (%q): %w", i+1, fe.ID, err))
			continue
		}
		seen[e.ID] = true
		out = append(out, e)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func (fe fileEndpoint) endpoint() (*Endpoint, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	e := &Endpoint{
		ID:             fe.ID,
		URL:            fe.URL,
		Secret:         []byte(fe.Secret),
		MaxWait:        fe.Batch.MaxWait.or(defaultMaxWait),
		InitialBackoff: fe.Retry.InitialBackoff.or(defaultInitial),
		MaxBackoff:     fe.Retry.MaxBackoff.or(defaultMaxBackoff),
		Timeout:        fe.Timeout.or(defaultTimeout),
		MaxChanges:     defaultMaxChanges,
		Attempts:       defaultAttempts,
	}
	if fe.Batch.MaxChanges != nil {
		e.MaxChanges = *fe.Batch.MaxChanges
	}
	if fe.Retry.Attempts != nil {
		e.Attempts = *fe.Retry.Attempts
	}
	if len(e.ID) == 0 || len(e.ID) > endpointIDMaxLength || !endpointIDPattern.MatchString(e.ID) {
		bad("id: want 1 to %d of A-Z a-z 0-9 . _ -", endpointIDMaxLength)
	}
	// The URL is not quoted in errors: it may hold a credential of the receiver's.
	if u, err := url.Parse(e.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("url: want an absolute http or https URL")
	}
	if len(e.Secret) < minSecretBytes {
		bad("secret: want at least %d bytes (32 random bytes, hex, suit)", minSecretBytes)
	}
	switch fe.View {
	case "", "public":
	case "operator":
		e.Operator = true
	default:
		bad("view %q: want public or operator", fe.View)
	}
	e.Filter.Users = set(fe.Filter.Users, func(s string) error { return presence.ValidateID(s, presence.MaxUserIDLen) }, "filter.users", bad)
	e.Filter.Groups = set(fe.Filter.Groups, presence.ValidateGroupID, "filter.groups", bad)
	e.Filter.Causes = set(fe.Filter.Causes, oneOf("event", "timeout", "erase"), "filter.causes", bad)
	e.Filter.Types = set(fe.Filter.Types, oneOf(typeStatus, typeCustom, typeMember), "filter.types", bad)
	if len(fe.Filter.Statuses) > 0 {
		e.Filter.Statuses = map[presence.Status]bool{}
		for _, s := range fe.Filter.Statuses {
			st, err := presence.ParseStatus(s)
			switch {
			case err != nil:
				bad("filter.statuses: %q: want online, idle, invisible or offline", s)
			case st == presence.Invisible && !e.Operator:
				bad("filter.statuses: invisible: only an operator view sees it (a public view sees offline)")
			default:
				e.Filter.Statuses[st] = true
			}
		}
	}
	if e.MaxChanges < 1 || e.MaxChanges > maxMaxChanges {
		bad("batch.maxChanges %d: want 1 to %d", e.MaxChanges, maxMaxChanges)
	}
	if e.MaxWait < 0 || e.MaxWait > maxMaxWait {
		bad("batch.maxWait %v: want 0 to %v", e.MaxWait, maxMaxWait)
	}
	if e.Attempts < 1 || e.Attempts > maxAttempts {
		bad("retry.attempts %d: want 1 to %d", e.Attempts, maxAttempts)
	}
	if e.InitialBackoff < minBackoff || e.MaxBackoff < e.InitialBackoff || e.MaxBackoff > maxBackoffCeiling {
		bad("retry: want %v ≤ initialBackoff (%v) ≤ maxBackoff (%v) ≤ %v", minBackoff, e.InitialBackoff, e.MaxBackoff, maxBackoffCeiling)
	}
	if e.Timeout < minTimeout || e.Timeout > maxTimeout {
		bad("timeout %v: want %v to %v", e.Timeout, minTimeout, maxTimeout)
	}
	return e, errors.Join(errs...)
}

func oneOf(values ...string) func(string) error {
	return func(s string) error {
		if !slices.Contains(values, s) {
			return fmt.Errorf("want one of %v", values)
		}
		return nil
	}
}

// set is list as a set after checking each value; nil for an empty list (every value).
func set(list []string, check func(string) error, field string, bad func(string, ...any)) map[string]bool {
	if len(list) == 0 {
		return nil
	}
	m := make(map[string]bool, len(list))
	for _, s := range list {
		if err := check(s); err != nil {
			bad("%s: %q: %v", field, s, err)
			continue
		}
		m[s] = true
	}
	return m
}

// matches reports whether the endpoint wants c, as its view shows c.
func (f Filter) matches(c *change, st presence.Status) bool {
	if f.Users != nil && !f.Users[c.userID] {
		return false
	}
	if f.Types != nil && !f.Types[c.filterType()] {
		return false
	}
	if f.Statuses != nil && !f.Statuses[st] {
		return false
	}
	if f.Causes != nil && (c.group != "" || !f.Causes[c.cause()]) {
		return false
	}
	if f.Groups != nil {
		in := f.Groups[c.group]
		for _, g := range c.groups {
			in = in || f.Groups[g]
		}
		if !in {
			return false
		}
	}
	return true
}

// endpointSet is the endpoints in force, replaced whole on each reload.
type endpointSet struct {
	list    []*Endpoint
	version uint64
}

// endpointsFile is the endpoints file, read at start and every reload interval.
type endpointsFile struct {
	path string
	sum  [32]byte
}

// load reads the file again; changed is false when its content is what it was. An
// empty path is a notifier without endpoints.
func (f *endpointsFile) load() (list []*Endpoint, changed bool, err error) {
	if f.path == "" {
		return nil, false, nil
	}
	raw, err := os.ReadFile(f.path)
	if err != nil {
		return nil, false, fmt.Errorf("PULSE_NOTIFIER_ENDPOINTS_FILE: %w", err)
	}
	sum := sha256.Sum256(raw)
	if sum == f.sum {
		return nil, false, nil
	}
	list, err = ParseEndpoints(raw)
	if err != nil {
		return nil, false, fmt.Errorf("PULSE_NOTIFIER_ENDPOINTS_FILE %s: %w", f.path, err)
	}
	f.sum = sum
	return list, true, nil
}
