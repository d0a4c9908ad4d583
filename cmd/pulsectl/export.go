package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pulse-presence/pulse/internal/api/historyapi"
	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// pulsectl export USER [-json]: everything Pulse holds about one user, from query's
// GET /v1/users/{id}/export, the one implementation of the export (docs/query.md,
// "Export"). It sends PULSE_OPERATOR_KEY, as the other commands that read query, and
// the route answers operators only; the query service writes the audit line of each
// page it serves. pulsectl follows the timeline's cursor to its end and holds one page
// at a time: -json writes the document as the pages arrive, one document whatever
// their number; the summary keeps the counts and the newest few rows.

// exportRetries bounds the tries of one page answered 503 or 429 (Cassandra
// reconnecting, the instance's read slots busy, the key's rate): an export of a long
// history is many pages, and starting again from the first would cost them all again.
const exportRetries = 5

// exportMaxWait bounds one wait between two tries, whatever Retry-After says;
// exportMinWait is the least (a variable: tests shorten it).
const exportMaxWait = 30 * time.Second

var exportMinWait = time.Second

func runExport(ctx context.Context, args []string, stdout io.Writer) error {
	return runExportEnv(ctx, args, stdout, os.Getenv)
}

func runExportEnv(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	const usage = "export USER [-json] [-recent N] [-limit N]"
	fs, f := newQueryFlags("export", getenv,
		"query service base URL (env PULSE_QUERY_URL); the export needs PULSE_OPERATOR_KEY, a key with the operator scope")
	asJSON := fs.Bool("json", false, "print the whole export as one JSON document instead of a summary")
	recent := fs.Int("recent", 5, "the summary's newest timeline entries, sessions and days to print (0: the counts only)")
	limit := fs.Int("limit", 1000, "timeline entries per request (1-1000)")
	// An export is many pages for a user of a long history: a longer bound than the
	// other commands'.
	if tf := fs.Lookup("timeout"); tf != nil {
		_ = tf.Value.Set("10m")
		tf.DefValue = "10m0s"
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: pulsectl %s\n", usage)
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\nexport prints everything Pulse holds about USER: the live state in Redis and every history row in Cassandra "+
			"within the query service's PULSE_QUERY_EXPORT_RETENTION.")
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("usage: pulsectl %s", usage)
	}
	user := pos[0]
	if err := presence.ValidateID(user, presence.MaxUserIDLen); err != nil {
		return fmt.Errorf("user id %q: %w", user, err)
	}
	if *limit < 1 || *limit > 1000 {
		return fmt.Errorf("-limit %d: want 1 to 1000", *limit)
	}
	if *recent < 0 {
		return fmt.Errorf("-recent %d: want 0 or more", *recent)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	hc, err := httpClient(*f.ca, 0)
	if err != nil {
		return err
	}
	c := &queryClient{base: f.url, token: f.token, operator: f.operator, http: hc}
	pages := &exportPages{c: c, path: "/v1/users/" + url.PathEscape(user) + "/export", limit: *limit}
	if *asJSON {
		return writeExportJSON(ctx, pages, stdout)
	}
	return writeExportSummary(ctx, pages, *recent, stdout)
}

// exportPages reads an export page by page.
type exportPages struct {
	c     *queryClient
	path  string
	limit int
	// next is the cursor of the page to read; "" before the first and after the last.
	next string
	done bool
}

// read reads the next page; the first is the whole document but the rest of the
// timeline, the others the timeline's continuation alone. A page answered 503 or 429
// is tried again after its Retry-After, exportRetries times in all.
func (p *exportPages) read(ctx context.Context) (*historyapi.Export, error) {
	q := url.Values{"limit": {strconv.Itoa(p.limit)}}
	if p.next != "" {
		q.Set("cursor", p.next)
	}
	var page historyapi.Export
	for try := 1; ; try++ {
		err := p.c.get(ctx, p.path, q, &page)
		var se *statusError
		if err == nil || try == exportRetries || !errors.As(err, &se) ||
			(se.status != http.StatusServiceUnavailable && se.status != http.StatusTooManyRequests) {
			if err != nil {
				return nil, err
			}
			break
		}
		wait := min(max(se.retryAfter, exportMinWait), exportMaxWait)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (waiting to retry after: %w)", ctx.Err(), err)
		case <-time.After(wait):
		}
	}
	p.next, p.done = "", true
	if n := page.History.Timeline.NextCursor; n != nil {
		p.next, p.done = *n, false
	}
	page.History.Timeline.NextCursor = nil
	return &page, nil
}

// entriesKey is the timeline's entries in the first page's indented JSON: the only
// "entries" member of the document, and a key (a string value has its quotes
// escaped), so the only place these bytes occur.
const entriesKey = `"entries": [`

// writeExportJSON writes the export as one indented JSON document: the first page with
// its timeline's entries left open, then every page's entries as they arrive, then
// the rest of the first page. The document is the first page's with every entry of the
// timeline and nextCursor null.
func writeExportJSON(ctx context.Context, pages *exportPages, stdout io.Writer) error {
	first, err := pages.read(ctx)
	if err != nil {
		return err
	}
	entries := first.History.Timeline.Entries
	first.History.Timeline.Entries = []historyapi.TimelineEntry{}
	doc, err := json.MarshalIndent(first, "", "  ")
	if err != nil {
		return err
	}
	i := bytes.Index(doc, []byte(entriesKey+"]"))
	if i < 0 || bytes.Count(doc, []byte(entriesKey)) != 1 {
		return errors.New("export: the answer's timeline has no single entries list")
	}
	// The entries' indentation: the key's, and two more.
	indent := "  " + string(doc[bytes.LastIndexByte(doc[:i], '\n')+1:i])
	w := bufio.NewWriter(stdout)
	w.Write(doc[:i+len(entriesKey)])
	n := 0
	for {
		for _, e := range entries {
			b, err := json.MarshalIndent(e, indent, "  ")
			if err != nil {
				return err
			}
			if n > 0 {
				w.WriteString(",")
			}
			w.WriteString("\n" + indent)
			w.Write(b)
			n++
		}
		if pages.done {
			break
		}
		page, err := pages.read(ctx)
		if err != nil {
			return err
		}
		entries = page.History.Timeline.Entries
	}
	if n > 0 {
		w.WriteString("\n" + indent[2:])
	}
	w.Write(doc[i+len(entriesKey):])
	w.WriteString("\n")
	return w.Flush()
}

// writeExportSummary prints what the export holds for people: the live state, the
// history's status row and index, the counts, and the newest recent timeline
// entries, sessions and days, each a table as pulsectl history and sessions print
// them.
func writeExportSummary(ctx context.Context, pages *exportPages, recent int, stdout io.Writer) error {
	first, err := pages.read(ctx)
	if err != nil {
		return err
	}
	h := &first.History
	tl := h.Timeline
	newest := tl.Entries[:min(recent, len(tl.Entries))]
	total := len(tl.Entries)
	for !pages.done {
		page, err := pages.read(ctx)
		if err != nil {
			return err
		}
		total += len(page.History.Timeline.Entries)
	}

	var b strings.Builder
	ts := func(t *time.Time) string {
		if t == nil {
			return "never"
		}
		return fmtTime(t, false)
	}
	fmt.Fprintf(&b, "user %s, exported %s; history from %s to %s\n", first.UserID, ts(&first.ExportedAt), ts(&tl.From), ts(&tl.To))
	b.WriteString("\nnow (Redis): ")
	if cur := first.Current; cur == nil {
		b.WriteString("nothing held\n")
	} else {
		st := cur.Status
		if cur.Invisible && cur.Status != "invisible" {
			st += " (invisible)"
		}
		fmt.Fprintf(&b, "%s since %s, last active %s, last seen %s\n", st, ts(cur.LastUpdated), ts(cur.LastActive), ts(cur.LastSeen))
		fmt.Fprintf(&b, "  as others see it: last active %s, last seen %s\n", ts(cur.Public.LastActive), ts(cur.Public.LastSeen))
		if cur.Custom != nil {
			fmt.Fprintf(&b, "  custom status: %s (set %s)\n", fmtCustom(cur.Custom, false), ts(cur.CustomSetAt))
		}
		for _, d := range cur.Devices {
			hidden := ""
			if d.Hidden {
				hidden = ", hidden"
			}
			fmt.Fprintf(&b, "  device %s: %s, last seen %s%s\n", d.DeviceID, d.Status, ts(&d.LastSeen), hidden)
		}
		fmt.Fprintf(&b, "  groups: %s\n", listOrNone(cur.Groups))
		fmt.Fprintf(&b, "  shard %d, index %d\n", cur.Shard, cur.Index)
	}
	b.WriteString("\nhistory (Cassandra):\n  status row: ")
	if s := h.Status; s == nil {
		b.WriteString("none\n")
	} else {
		st := "no status"
		if s.Status != nil {
			st = *s.Status
		}
		ev := "none"
		if s.LastEventID != nil {
			ev = *s.LastEventID
		}
		fmt.Fprintf(&b, "%s since %s, last active %s, last seen %s, last event %s\n", st, ts(s.LastUpdated), ts(s.LastActive), ts(s.LastSeen), ev)
		if s.Custom != nil {
			fmt.Fprintf(&b, "    custom status: %s (set %s)\n", fmtCustom(s.Custom, false), ts(s.CustomSetAt))
		}
		fmt.Fprintf(&b, "    groups: %s\n", listOrNone(s.Groups))
	}
	b.WriteString("  point in time: ")
	if p := h.PointInTime; p == nil {
		b.WriteString("not indexed\n")
	} else {
		fmt.Fprintf(&b, "shard %d, index %d\n", p.Shard, p.Index)
	}
	var sessions []historyapi.Session
	var days []historyapi.UserDay
	open, truncated := 0, ""
	if h.Sessions != nil {
		sessions = h.Sessions.Sessions
		if h.Sessions.Truncated {
			truncated = " (the newest; there are more)"
		}
	}
	for _, s := range sessions {
		if s.Open {
			open++
		}
	}
	if h.Daily != nil {
		days = h.Daily.Days
	}
	entriesWord := "timeline entries"
	if total == 1 {
		entriesWord = "timeline entry"
	}
	fmt.Fprintf(&b, "  %d %s, %s%s (%d open), %s\n", total, entriesWord, plural(len(sessions), "session"), truncated, open, plural(len(days), "day"))
	if _, err := io.WriteString(stdout, b.String()); err != nil {
		return err
	}
	if recent == 0 {
		return nil
	}

	section := func(title string, shown, of int, t *table) error {
		if shown == 0 {
			return nil
		}
		if _, err := fmt.Fprintf(stdout, "\nnewest %s (%d of %d):\n", title, shown, of); err != nil {
			return err
		}
		return t.print(stdout, false)
	}
	t := &table{header: timelineHeader}
	for _, e := range newest {
		t.add(timelineCells(e, false)...)
	}
	if err := section("timeline entries", len(newest), total, t); err != nil {
		return err
	}
	t = &table{header: sessionsHeader}
	for _, s := range sessions[:min(recent, len(sessions))] {
		t.add(sessionCells(s, false)...)
	}
	if err := section("sessions", min(recent, len(sessions)), len(sessions), t); err != nil {
		return err
	}
	t = &table{header: dayHeader("DAY")}
	for _, d := range days[:min(recent, len(days))] {
		t.add(append([]string{d.Day}, dayCells(d.DayTotals, false)...)...)
	}
	return section("days", min(recent, len(days)), len(days), t)
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}
