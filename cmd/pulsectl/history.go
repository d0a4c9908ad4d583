package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pulse-presence/pulse/cmd/internal/trust"
	"github.com/pulse-presence/pulse/internal/api/customjson"
	"github.com/pulse-presence/pulse/internal/api/historyapi"
	"github.com/pulse-presence/pulse/internal/platform/ports"
)

// The analysts' commands: history, sessions and stats read the query service's
// history routes over HTTP (docs/analytics.md) and print tables, or CSV with -csv.
// They follow cursors to the end of the range, so one command prints everything.

// readFlags are the flags every analysts' command takes.
type readFlags struct {
	url string
	// token is the API key sent (from the environment, never a flag: a flag's value
	// shows in the process list): PULSE_OPERATOR_KEY, else PULSE_READER_KEY.
	token string
	// operator: the key is an operator's, so every request asks for the operator
	// view, which a user's history needs.
	operator bool
	csv      bool
	timeout  time.Duration
	from     string
	to       string
	// ca is the PEM file of a private CA trusted for an https -url.
	ca *string
}

func newReadFlags(name string, getenv func(string) string, from, to string) (*flag.FlagSet, *readFlags) {
	fs, f := newQueryFlags(name, getenv,
		"query service base URL (env PULSE_QUERY_URL); the API key is read from PULSE_OPERATOR_KEY (a user's history needs it), else PULSE_READER_KEY")
	fs.BoolVar(&f.csv, "csv", false, "print CSV instead of an aligned table")
	fs.StringVar(&f.from, "from", "", from)
	fs.StringVar(&f.to, "to", "", to)
	return fs, f
}

// newQueryFlags are the flags of every command that calls query: -url (described by
// urlUsage), -timeout and -ca.
func newQueryFlags(name string, getenv func(string) string, urlUsage string) (*flag.FlagSet, *readFlags) {
	f := &readFlags{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	base := getenv("PULSE_QUERY_URL")
	if base == "" {
		base = ports.LocalURL(ports.Query)
	}
	fs.StringVar(&f.url, "url", base, urlUsage)
	f.token, f.operator = apiKey(getenv)
	fs.DurationVar(&f.timeout, "timeout", 60*time.Second, "bounds the whole command")
	f.ca = trust.Flag(fs, getenv)
	return fs, f
}

// parseInterspersed parses flags wherever they stand among the positional arguments
// ("history user alice -from 2026-11-22"), and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// queryClient calls the query service's history routes.
type queryClient struct {
	base     string
	token    string
	operator bool
	http     *http.Client
}

// apiKey is the key pulsectl sends to query and whether it is an operator's:
// PULSE_OPERATOR_KEY, else the deprecated PULSE_OPERATOR_TOKEN, else
// PULSE_READER_KEY (the aggregates only).
func apiKey(getenv func(string) string) (key string, operator bool) {
	for _, name := range []string{"PULSE_OPERATOR_KEY", "PULSE_OPERATOR_TOKEN"} {
		if k := getenv(name); k != "" {
			return k, true
		}
	}
	return getenv("PULSE_READER_KEY"), false
}

// apiError is the error shape of every Pulse route.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
}

// statusError is an error answer of the API: its status, its Retry-After, and the
// message do makes of it.
type statusError struct {
	status     int
	retryAfter time.Duration
	msg        string
}

func (e *statusError) Error() string { return e.msg }

func (c *queryClient) get(ctx context.Context, path string, q url.Values, out any) error {
	if c.operator {
		q = cloneValues(q)
		q.Set("view", "operator")
	}
	return c.do(ctx, http.MethodGet, path, q, nil, c.token, c.readHint, out)
}

// readHint is what to set when a read is refused with status.
func (c *queryClient) readHint(status int) string {
	switch {
	case status == http.StatusUnauthorized && c.token == "":
		return " (set PULSE_READER_KEY or PULSE_OPERATOR_KEY)"
	case status == http.StatusForbidden && !c.operator:
		return " (set PULSE_OPERATOR_KEY)"
	}
	return ""
}

// do sends method to path with the query q and, unless nil, body as JSON, with the
// API key token, and decodes a 2xx answer into out. An error answer becomes an error
// with the API's message (GETs are named by their path alone), followed by what hint
// says for its status.
func (c *queryClient) do(ctx context.Context, method, path string, q url.Values, body any, token string,
	hint func(status int) string, out any) error {
	u := strings.TrimRight(c.base, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	name := path
	if method != http.MethodGet {
		name = method + " " + path
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s: encoding the request: %w", name, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, u, err)
	}
	defer res.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, u, err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		se := &statusError{status: res.StatusCode, msg: fmt.Sprintf("%s: %s", name, res.Status)}
		ra := res.Header.Get("Retry-After")
		if secs, err := strconv.Atoi(ra); err == nil && secs >= 0 {
			se.retryAfter = time.Duration(secs) * time.Second
		}
		var e apiError
		if json.Unmarshal(ans, &e) == nil && e.Error.Message != "" {
			msg := e.Error.Message
			if e.Error.Field != "" {
				msg = e.Error.Field + ": " + msg
			}
			if ra != "" {
				msg += " (retry after " + ra + "s)"
			}
			se.msg = fmt.Sprintf("%s: %d %s%s", name, res.StatusCode, msg, hint(res.StatusCode))
		}
		return se
	}
	if err := json.Unmarshal(ans, out); err != nil {
		return fmt.Errorf("%s: decoding the answer: %w", name, err)
	}
	return nil
}

// table collects rows and prints them aligned, or as CSV.
type table struct {
	header []string
	rows   [][]string
	// note follows the table when it is printed for people (never in CSV).
	note string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) print(w io.Writer, asCSV bool) error {
	if asCSV {
		cw := csv.NewWriter(w)
		_ = cw.Write(t.header)
		_ = cw.WriteAll(t.rows) // flushes
		return cw.Error()
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.header, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Empty cells at the end of a row are padded into trailing blanks: drop them.
	for line := range strings.Lines(b.String()) {
		if _, err := fmt.Fprintln(w, strings.TrimRight(line, " \n")); err != nil {
			return err
		}
	}
	if t.note != "" {
		_, err := fmt.Fprintln(w, t.note)
		return err
	}
	return nil
}

// Cell formats: tables are for people, CSV for tools.

func fmtTime(t *time.Time, asCSV bool) string {
	if t == nil || t.IsZero() {
		return ""
	}
	if asCSV {
		return t.UTC().Format(time.RFC3339Nano)
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}

func fmtSeconds(s float64, asCSV bool) string {
	if asCSV {
		return strconv.FormatFloat(s, 'f', -1, 64)
	}
	return (time.Duration(math.Round(s*1e6)) * time.Microsecond).Round(time.Millisecond).String()
}

func fmtInt[T ~int | ~int64 | ~uint64](n T) string { return strconv.FormatInt(int64(n), 10) }

// fmtOptInt is n, or "-" for a number the answer leaves out (one the key may not see).
func fmtOptInt(n *int64) string {
	if n == nil {
		return "-"
	}
	return fmtInt(*n)
}

// runAnalytics runs one analysts' command: it parses flags, wants nargs positional
// arguments, and prints what fetch collects.
func runAnalytics(ctx context.Context, fs *flag.FlagSet, f *readFlags, args []string, nargs int, usage string,
	stdout io.Writer, fetch func(ctx context.Context, c *queryClient, pos []string) (*table, error)) error {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: pulsectl %s\n", usage)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != nargs {
		fs.Usage()
		return fmt.Errorf("usage: pulsectl %s", usage)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	hc, err := httpClient(*f.ca, 0)
	if err != nil {
		return err
	}
	t, err := fetch(ctx, &queryClient{base: f.url, token: f.token, operator: f.operator, http: hc}, pos)
	if err != nil {
		return err
	}
	return t.print(stdout, f.csv)
}

// httpClient is an HTTP client trusting the system's roots and caFile's CAs for https
// URLs; timeout 0: none (the command's context bounds it).
func httpClient(caFile string, timeout time.Duration) (*http.Client, error) {
	tc, err := trust.Config(caFile)
	if err != nil {
		return nil, fmt.Errorf("-ca: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return &http.Client{Timeout: timeout, Transport: tr}, nil
}

// cloneValues copies q, so adding to it leaves the caller's values alone.
func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = append([]string(nil), v...)
	}
	return out
}

func rangeQuery(f *readFlags) url.Values {
	q := url.Values{}
	if f.from != "" {
		q.Set("from", f.from)
	}
	if f.to != "" {
		q.Set("to", f.to)
	}
	return q
}

const (
	timeRangeFrom = "start, included: an RFC 3339 time or a date (midnight UTC)"
	timeRangeTo   = "end, excluded: an RFC 3339 time or a date (midnight UTC); default now"
	dayRangeFrom  = "first day, included (YYYY-MM-DD)"
	dayRangeTo    = "last day, included (YYYY-MM-DD)"
)

// pulsectl history user ID | history daily ID
func runHistory(ctx context.Context, args []string, stdout io.Writer) error {
	return runHistoryEnv(ctx, args, stdout, os.Getenv)
}

func runHistoryEnv(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	if len(args) == 0 || (args[0] != "user" && args[0] != "daily") {
		return errors.New("usage: pulsectl history user ID [-from -to] | pulsectl history daily ID [-from -to]")
	}
	if args[0] == "daily" {
		fs, f := newReadFlags("history daily", getenv, dayRangeFrom+"; default 30 days before -to", dayRangeTo+"; default today")
		return runAnalytics(ctx, fs, f, args[1:], 1, "history daily ID [-from DAY] [-to DAY] [-csv]", stdout,
			func(ctx context.Context, c *queryClient, pos []string) (*table, error) {
				var ans historyapi.UserDays
				if err := c.get(ctx, "/v1/users/"+url.PathEscape(pos[0])+"/daily", rangeQuery(f), &ans); err != nil {
					return nil, err
				}
				t := &table{header: dayHeader("DAY")}
				for _, d := range ans.Days {
					t.add(append([]string{d.Day}, dayCells(d.DayTotals, f.csv)...)...)
				}
				return t, nil
			})
	}
	fs, f := newReadFlags("history user", getenv, timeRangeFrom+"; default 24 hours before -to", timeRangeTo)
	limit := fs.Int("limit", 1000, "entries per request (1-1000)")
	return runAnalytics(ctx, fs, f, args[1:], 1, "history user ID [-from TIME] [-to TIME] [-csv]", stdout,
		func(ctx context.Context, c *queryClient, pos []string) (*table, error) {
			t := &table{header: timelineHeader}
			q := rangeQuery(f)
			q.Set("limit", strconv.Itoa(*limit))
			for {
				var page historyapi.TimelinePage
				if err := c.get(ctx, "/v1/users/"+url.PathEscape(pos[0])+"/timeline", q, &page); err != nil {
					return nil, err
				}
				for _, e := range page.Entries {
					t.add(timelineCells(e, f.csv)...)
				}
				if page.NextCursor == nil {
					return t, nil
				}
				q.Set("cursor", *page.NextCursor)
			}
		})
}

// pulsectl sessions ID
func runSessions(ctx context.Context, args []string, stdout io.Writer) error {
	return runSessionsEnv(ctx, args, stdout, os.Getenv)
}

func runSessionsEnv(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	fs, f := newReadFlags("sessions", getenv, timeRangeFrom+"; default 31 days before -to", timeRangeTo)
	return runAnalytics(ctx, fs, f, args, 1, "sessions ID [-from TIME] [-to TIME] [-csv]", stdout,
		func(ctx context.Context, c *queryClient, pos []string) (*table, error) {
			var ans historyapi.Sessions
			if err := c.get(ctx, "/v1/users/"+url.PathEscape(pos[0])+"/sessions", rangeQuery(f), &ans); err != nil {
				return nil, err
			}
			t := &table{header: sessionsHeader}
			for _, s := range ans.Sessions {
				t.add(sessionCells(s, f.csv)...)
			}
			if ans.Truncated {
				fmt.Fprintln(os.Stderr, "pulsectl: more than 10,000 sessions in the range; the newest are listed, narrow -from")
			}
			return t, nil
		})
}

// timelineHeader heads a table of timeline entries, whose cells timelineCells makes.
var timelineHeader = []string{"OCCURRED_AT", "TYPE", "KIND", "STATUS", "PREVIOUS", "DEVICE", "SOURCE", "CAUSE", "STALE", "RECEIVED_AT", "ENTRY_ID", "CUSTOM"}

func timelineCells(e historyapi.TimelineEntry, asCSV bool) []string {
	return []string{fmtTime(&e.OccurredAt, asCSV), e.EntryType, e.Kind, e.Status, e.PreviousStatus, e.DeviceID,
		e.Source, e.Cause, strconv.FormatBool(e.Stale), fmtTime(e.ReceivedAt, asCSV), e.EntryID, fmtCustom(e.Data, asCSV)}
}

// sessionsHeader heads a table of sessions, whose cells sessionCells makes.
var sessionsHeader = []string{"START", "END", "OPEN", "DURATION", "ONLINE", "IDLE", "INVISIBLE", "THROUGH", "STATUS"}

func sessionCells(s historyapi.Session, asCSV bool) []string {
	end := s.Through
	if s.End != nil {
		end = *s.End
	}
	return []string{fmtTime(&s.Start, asCSV), fmtTime(s.End, asCSV), strconv.FormatBool(s.Open),
		fmtSeconds(end.Sub(s.Start).Seconds(), asCSV), fmtSeconds(s.OnlineSeconds, asCSV),
		fmtSeconds(s.IdleSeconds, asCSV), fmtSeconds(s.InvisibleSeconds, asCSV), fmtTime(&s.Through, asCSV), s.Status}
}

func dayHeader(first ...string) []string {
	return append(first, "ONLINE", "IDLE", "INVISIBLE", "SESSIONS", "FIRST_SEEN", "LAST_SEEN", "THROUGH", "STATUS")
}

// dayCells are a day's totals as table cells, in dayHeader's order.
func dayCells(d historyapi.DayTotals, asCSV bool) []string {
	return []string{fmtSeconds(d.OnlineSeconds, asCSV), fmtSeconds(d.IdleSeconds, asCSV), fmtSeconds(d.InvisibleSeconds, asCSV),
		fmtInt(d.Sessions), fmtTime(d.FirstSeen, asCSV), fmtTime(d.LastSeen, asCSV), fmtTime(&d.Through, asCSV), d.Status}
}

// pulsectl stats daily|concurrency|uniques
func runStats(ctx context.Context, args []string, stdout io.Writer) error {
	return runStatsEnv(ctx, args, stdout, os.Getenv)
}

func runStatsEnv(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	const usage = "usage: pulsectl stats daily|concurrency|uniques -from -to [-step minute|hour|day] [-period hour|day|week|month] [-group ID] [-csv]"
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "daily":
		fs, f := newReadFlags("stats daily", getenv, dayRangeFrom+"; default yesterday", dayRangeTo+"; default -from")
		return runAnalytics(ctx, fs, f, args[1:], 0, "stats daily [-from DAY] [-to DAY] [-csv]", stdout,
			func(ctx context.Context, c *queryClient, _ []string) (*table, error) {
				return statsDaily(ctx, c, f)
			})
	case "concurrency":
		fs, f := newReadFlags("stats concurrency", getenv, timeRangeFrom+"; default an hour before -to", timeRangeTo)
		st := fs.String("step", "minute", "minute, hour or day")
		group := fs.String("group", "", "the current members of this group only (at most a day; minutes history holds final)")
		return runAnalytics(ctx, fs, f, args[1:], 0, "stats concurrency [-from TIME] [-to TIME] [-step minute|hour|day] [-group ID] [-csv]", stdout,
			func(ctx context.Context, c *queryClient, _ []string) (*table, error) {
				q := rangeQuery(f)
				q.Set("step", *st)
				setGroup(q, *group)
				var ans historyapi.Concurrency
				if err := c.get(ctx, "/v1/stats/concurrency", q, &ans); err != nil {
					return nil, err
				}
				t := &table{header: []string{"AT", "CLOSE_ONLINE", "CLOSE_IDLE", "CLOSE_INVISIBLE", "PEAK_ONLINE", "MINUTES"}}
				for _, p := range ans.Points {
					t.add(fmtTime(&p.At, f.csv), fmtInt(p.CloseOnline), fmtInt(p.CloseIdle), fmtOptInt(p.CloseInvisible), fmtInt(p.PeakOnline), fmtInt(p.Minutes))
				}
				return t, nil
			})
	case "uniques":
		fs, f := newReadFlags("stats uniques", getenv, timeRangeFrom+"; default 24 hours before -to", timeRangeTo)
		period := fs.String("period", "day", "hour, day, week or month")
		group := fs.String("group", "", "the current members of this group only")
		return runAnalytics(ctx, fs, f, args[1:], 0, "stats uniques [-from TIME] [-to TIME] [-period hour|day|week|month] [-group ID] [-csv]", stdout,
			func(ctx context.Context, c *queryClient, _ []string) (*table, error) {
				q := rangeQuery(f)
				q.Set("period", *period)
				setGroup(q, *group)
				var ans historyapi.Uniques
				if err := c.get(ctx, "/v1/stats/uniques", q, &ans); err != nil {
					return nil, err
				}
				t := &table{header: []string{"START", "END", "USERS", "SHARDS", "BITMAP_BYTES", "HLL_BYTES"}}
				for _, p := range ans.Points {
					t.add(fmtTime(&p.Start, f.csv), fmtTime(&p.End, f.csv), fmtInt(p.Users), fmtInt(p.Shards), fmtInt(p.BitmapBytes), fmtInt(p.HyperLogLogBytes))
				}
				return t, nil
			})
	}
	return fmt.Errorf("unknown stats %q; %s", args[0], usage)
}

// setGroup asks for group g's current members alone (group=); "" for everyone.
func setGroup(q url.Values, g string) {
	if g != "" {
		q.Set("group", g)
	}
}

// statsDaily lists every user's totals of each day from -from to -to, following
// each day's cursor to its end.
func statsDaily(ctx context.Context, c *queryClient, f *readFlags) (*table, error) {
	parse := func(name, s string, def time.Time) (time.Time, error) {
		if s == "" {
			return def, nil
		}
		t, err := time.Parse(time.DateOnly, s)
		if err != nil {
			return t, fmt.Errorf("-%s: want a day such as 2026-11-22, got %q", name, s)
		}
		return t, nil
	}
	now := time.Now().UTC()
	from, err := parse("from", f.from, time.Date(now.Year(), now.Month(), now.Day()-1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		return nil, err
	}
	to, err := parse("to", f.to, from)
	if err != nil {
		return nil, err
	}
	if to.Before(from) || to.Sub(from) > 366*24*time.Hour {
		return nil, fmt.Errorf("-from %s -to %s: want -to on or after -from, at most a year later", from.Format(time.DateOnly), to.Format(time.DateOnly))
	}
	t := &table{header: dayHeader("DAY", "USER")}
	for d := from; !d.After(to); d = d.AddDate(0, 0, 1) {
		q := url.Values{"day": {d.Format(time.DateOnly)}, "limit": {"1000"}}
		for {
			var page historyapi.DailyPage
			if err := c.get(ctx, "/v1/stats/daily", q, &page); err != nil {
				return nil, err
			}
			for _, u := range page.Users {
				t.add(append([]string{page.Day, u.UserID}, dayCells(u.DayTotals, f.csv)...)...)
			}
			if page.NextCursor == nil {
				break
			}
			q.Set("cursor", *page.NextCursor)
		}
	}
	return t, nil
}

// fmtCustom is what a timeline event did to the custom status: "" when it left it as
// it was, "(cleared)" for a clear, else its emoji and text and when it was to clear.
func fmtCustom(d *customjson.Out, asCSV bool) string {
	switch {
	case d == nil:
		return ""
	case d.Text == "" && d.Emoji == "":
		return "(cleared)"
	}
	s := strings.TrimSpace(d.Emoji + " " + d.Text)
	if d.Until != nil {
		s += " until " + fmtTime(d.Until, asCSV)
	}
	return s
}
