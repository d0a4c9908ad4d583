package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// pulsectl groups set|add|remove|delete|show|online: a group's members (a chat
// channel, a team) and their presence, through query's group routes
// (PUT/PATCH/DELETE/GET /v1/groups/{id}/members, GET /v1/groups/{id}/online[/count]).
// Writes send PULSE_PRODUCER_KEY (scope write); reads PULSE_OPERATOR_KEY, else
// PULSE_READER_KEY, like the other commands that read query.

// maxGroupBatch is the most user ids query takes in one membership write.
const maxGroupBatch = 100_000

// groupsUsage lists the subcommands.
const groupsUsage = "usage: pulsectl groups set GROUP [USER...] [-file F] [-wait] | add GROUP [USER...] [-file F] [-wait] | " +
	"remove GROUP [USER...] [-file F] [-wait] | delete GROUP [-wait] | show GROUP [-count] [-csv] | online GROUP [-status S] [-limit N] [-csv]"

// groupsHelp says what subcommand sub does, for its -h; ok is false for an unknown one.
func groupsHelp(sub string) (help string, ok bool) {
	switch sub {
	case "set":
		return `set replaces the group's members with the users given (PUT). Up to -batch ids go in one PUT;
with more, set reads the current members (which needs PULSE_READER_KEY or
PULSE_OPERATOR_KEY as well) and PATCHes the difference in batches, so that members who
stay never leave for a moment. Either way it is not atomic against other writers. An
empty list is refused: delete empties a group.`, true
	case "add":
		return "add makes the users members (PATCH add), in batches of -batch ids.", true
	case "remove":
		return "remove takes the users out of the group (PATCH remove), in batches of -batch ids.", true
	case "delete":
		return "delete empties the group (DELETE).", true
	case "show":
		return "show prints the group's counts by status and its members (the members only with -csv).", true
	case "online":
		return "online lists the group's present members and their status.", true
	}
	return "", false
}

func runGroups(ctx context.Context, args []string, stdout io.Writer) error {
	return runGroupsEnv(ctx, args, os.Stdin, stdout, os.Getenv)
}

func runGroupsEnv(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		return errors.New(groupsUsage)
	}
	sub := args[0]
	help, ok := groupsHelp(sub)
	if !ok {
		return fmt.Errorf("unknown groups %q; %s", sub, groupsUsage)
	}
	fs, f := newQueryFlags("groups "+sub, getenv, "query service base URL (env PULSE_QUERY_URL); writes send PULSE_PRODUCER_KEY "+
		"(scope write), reads PULSE_OPERATOR_KEY (the operator view), else PULSE_READER_KEY")
	g := &groupsCmd{writeKey: getenv("PULSE_PRODUCER_KEY"), batch: maxGroupBatch, stdout: stdout}
	o := &groupsOptions{}
	usage := "groups " + sub + " GROUP" + o.declare(sub, fs, f, g)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: pulsectl %s\n", usage)
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\n"+help)
	}
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return fmt.Errorf("usage: pulsectl %s", usage)
	}
	users, err := g.checkArgs(sub, usage, pos, o.file, stdin)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	hc, err := httpClient(*f.ca, 0)
	if err != nil {
		return err
	}
	g.c = &queryClient{base: f.url, token: f.token, operator: f.operator, http: hc}
	switch sub {
	case "show":
		return g.show(ctx, o.count, f.csv)
	case "online":
		return g.online(ctx, o.status, o.limit, f.csv)
	}
	want, err := g.write(ctx, sub, users)
	if err != nil || !o.wait {
		return err
	}
	return g.wait(ctx, want)
}

// groupsOptions are the flags of one subcommand besides the query flags.
type groupsOptions struct {
	file, status string
	wait, count  bool
	limit        int
}

// declare adds subcommand sub's flags to fs (-batch sets g's batch, -csv f's) and
// returns their part of its usage line.
func (o *groupsOptions) declare(sub string, fs *flag.FlagSet, f *readFlags, g *groupsCmd) string {
	switch sub {
	case "set", "add", "remove":
		fs.StringVar(&o.file, "file", "", "read user ids from this file, one a line (blank lines skipped, surrounding blanks dropped); - is stdin; ids that begin with - go here")
		fs.IntVar(&g.batch, "batch", maxGroupBatch, "user ids per request, at most 100000")
		fs.BoolVar(&o.wait, "wait", false, "after the write, wait until the group's members show it (bounded by -timeout), then print its counts")
		return " [USER...] [-file F] [-wait]"
	case "delete":
		fs.BoolVar(&o.wait, "wait", false, "after the write, wait until the group's members show it (bounded by -timeout), then print its counts")
		return " [-wait]"
	case "show":
		fs.BoolVar(&f.csv, "csv", false, "print CSV instead of aligned tables: the members, or with -count the counts")
		fs.BoolVar(&o.count, "count", false, "print the counts per status only, not the members")
		return " [-count] [-csv]"
	}
	fs.BoolVar(&f.csv, "csv", false, "print CSV instead of an aligned table")
	fs.StringVar(&o.status, "status", "", "list only this status: online, idle or invisible (invisible needs PULSE_OPERATOR_KEY)")
	fs.IntVar(&o.limit, "limit", 1000, "users per request (1-1000); the listing is followed to its end")
	return " [-status S] [-limit N] [-csv]"
}

// checkArgs takes the group id from pos and returns the user ids the write of sub
// names (the rest of pos, then those of file), refusing bad ones before any request.
func (g *groupsCmd) checkArgs(sub, usage string, pos []string, file string, stdin io.Reader) ([]string, error) {
	g.group = pos[0]
	if err := presence.ValidateGroupID(g.group); err != nil {
		return nil, fmt.Errorf("group id %q: %v", g.group, err)
	}
	if g.batch < 1 || g.batch > maxGroupBatch {
		return nil, fmt.Errorf("-batch=%d: want 1 to %d", g.batch, maxGroupBatch)
	}
	switch sub {
	case "delete", "show", "online":
		if len(pos) > 1 {
			return nil, fmt.Errorf("%s takes one group id, got %q; usage: pulsectl %s", sub, pos, usage)
		}
		return nil, nil
	}
	users, err := userIDs(pos[1:], file, stdin)
	if err != nil {
		return nil, err
	}
	if len(users) == 0 {
		hint := ""
		if sub == "set" {
			hint = "; pulsectl groups delete " + g.group + " empties the group"
		}
		return nil, fmt.Errorf("no user ids: give them as arguments or with -file%s", hint)
	}
	return users, nil
}

// groupsCmd runs one groups subcommand against query.
type groupsCmd struct {
	c *queryClient
	// writeKey is the key sent with writes (PULSE_PRODUCER_KEY); reads send c.token.
	writeKey string
	group    string
	batch    int
	stdout   io.Writer
}

func (g *groupsCmd) path(suffix string) string {
	return "/v1/groups/" + url.PathEscape(g.group) + suffix
}

// userIDs are the ids of args followed by those of file ("-": stdin), checked as
// query checks them, so a mistake is reported with where it stands. A duplicate is
// refused, as query refuses one.
func userIDs(args []string, file string, stdin io.Reader) ([]string, error) {
	ids := slices.Clone(args)
	from := make([]string, len(args))
	for i := range args {
		from[i] = "argument " + strconv.Itoa(i+2) // after the group id
	}
	if file != "" {
		r, name := stdin, "stdin"
		if file != "-" {
			fh, err := os.Open(file)
			if err != nil {
				return nil, fmt.Errorf("-file: %w", err)
			}
			defer fh.Close()
			r, name = fh, file
		}
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for line := 1; sc.Scan(); line++ {
			if id := strings.TrimSpace(sc.Text()); id != "" {
				ids = append(ids, id)
				from = append(from, fmt.Sprintf("%s:%d", name, line))
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
	}
	seen := make(map[string]int, len(ids))
	for i, id := range ids {
		if err := presence.ValidateID(id, presence.MaxUserIDLen); err != nil {
			return nil, fmt.Errorf("%s: user id %q %v", from[i], id, err)
		}
		if j, ok := seen[id]; ok {
			return nil, fmt.Errorf("%s: user %q is also %s", from[i], id, from[j])
		}
		seen[id] = i
	}
	return ids, nil
}

// memberWrite is query's answer to a membership write.
type memberWrite struct {
	Joins  int `json:"joins"`
	Leaves int `json:"leaves"`
}

// membership is what a write leaves: exact is the whole member list (set, delete),
// else in and out are users who must and must not be members.
type membership struct {
	exact   bool
	in, out []string
}

// write posts the membership change of sub and prints what query posted. It returns
// what the members are once the change is folded.
func (g *groupsCmd) write(ctx context.Context, sub string, users []string) (membership, error) {
	var joins, leaves []string
	want := membership{}
	switch sub {
	case "set":
		want = membership{exact: true, in: users}
		if len(users) <= g.batch {
			return want, g.send(ctx, []request{{method: http.MethodPut, body: map[string][]string{"userIds": users}}})
		}
		// PUT would drop every member outside its batch until a PATCH added them back:
		// post the difference with the current members instead.
		current, err := g.members(ctx)
		if err != nil {
			return want, fmt.Errorf("reading the members, to post the difference with them: %w", err)
		}
		joins, leaves = difference(current, users)
	case "add":
		want.in, joins = users, users
	case "remove":
		want.out, leaves = users, users
	case "delete":
		return membership{exact: true}, g.send(ctx, []request{{method: http.MethodDelete}})
	}
	return want, g.send(ctx, patches(joins, leaves, g.batch))
}

// difference is who joins and who leaves to turn the members current into want.
func difference(current, want []string) (joins, leaves []string) {
	in := make(map[string]bool, len(current))
	for _, id := range current {
		in[id] = true
	}
	stay := make(map[string]bool, len(want))
	for _, id := range want {
		stay[id] = true
		if !in[id] {
			joins = append(joins, id)
		}
	}
	for _, id := range current {
		if !stay[id] {
			leaves = append(leaves, id)
		}
	}
	return joins, leaves
}

// request is one membership write.
type request struct {
	method string
	body   any
}

// patchBody is a PATCH's body; query wants add or remove, not empty ones.
type patchBody struct {
	Add    []string `json:"add,omitempty"`
	Remove []string `json:"remove,omitempty"`
}

// patches are the PATCHes posting joins and leaves, at most batch ids each, leaves
// first.
func patches(joins, leaves []string, batch int) []request {
	var out []request
	for len(joins)+len(leaves) > 0 {
		var b patchBody
		n := min(len(leaves), batch)
		b.Remove, leaves = leaves[:n], leaves[n:]
		n = min(len(joins), batch-len(b.Remove))
		b.Add, joins = joins[:n], joins[n:]
		out = append(out, request{method: http.MethodPatch, body: b})
	}
	return out
}

// send makes the requests in order and prints what they posted; when one fails, the
// error says what the ones before it posted.
func (g *groupsCmd) send(ctx context.Context, reqs []request) error {
	var total memberWrite
	for i, r := range reqs {
		var ans memberWrite
		hint := func(status int) string {
			switch {
			case status == http.StatusUnauthorized && g.writeKey == "":
				return " (set PULSE_PRODUCER_KEY to a key with the write scope)"
			case status == http.StatusForbidden:
				return " (PULSE_PRODUCER_KEY must be an API key with the write scope)"
			}
			return ""
		}
		if err := g.c.do(ctx, r.method, g.path("/members"), nil, r.body, g.writeKey, hint, &ans); err != nil {
			if i == 0 {
				return err
			}
			return fmt.Errorf("request %d of %d: %w; the ones before it %s, so run the command again", i+1, len(reqs), err, posted(total))
		}
		total.Joins += ans.Joins
		total.Leaves += ans.Leaves
	}
	line := posted(total) + " to " + g.group
	if len(reqs) > 1 {
		line += fmt.Sprintf(" in %d requests", len(reqs))
	}
	_, err := fmt.Fprintln(g.stdout, line)
	return err
}

// posted says what membership writes posted: "posted 3 joins, 1 leave".
func posted(w memberWrite) string {
	return fmt.Sprintf("posted %s, %s", plural(w.Joins, "join"), plural(w.Leaves, "leave"))
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// members reads every member of the group, following the cursor.
func (g *groupsCmd) members(ctx context.Context) ([]string, error) {
	q := url.Values{"limit": {"1000"}}
	out := []string{}
	for {
		var page struct {
			UserIDs    []string `json:"userIds"`
			NextCursor *string  `json:"nextCursor"`
		}
		// The members route has no operator view: get would ask for one.
		if err := g.c.do(ctx, http.MethodGet, g.path("/members"), q, nil, g.c.token, g.c.readHint, &page); err != nil {
			return nil, err
		}
		out = append(out, page.UserIDs...)
		if page.NextCursor == nil {
			return out, nil
		}
		q.Set("cursor", *page.NextCursor)
	}
}

// wait reads the members until they are want, then prints the group's counts.
func (g *groupsCmd) wait(ctx context.Context, want membership) error {
	missing := ""
	for {
		current, err := g.members(ctx)
		if err != nil {
			if missing != "" && ctx.Err() != nil {
				return fmt.Errorf("the members of %s do not show the write within -timeout: %s", g.group, missing)
			}
			return fmt.Errorf("waiting for the write to show: %w", err)
		}
		if missing = want.missing(current); missing == "" {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the members of %s do not show the write within -timeout: %s", g.group, missing)
		case <-time.After(200 * time.Millisecond):
		}
	}
	c, err := g.count(ctx)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(g.stdout, c.line())
	return err
}

// missing says how the members current differ from m, "" when they do not.
func (m membership) missing(current []string) string {
	in := make(map[string]bool, len(current))
	for _, id := range current {
		in[id] = true
	}
	var absent, present []string
	for _, id := range m.in {
		if !in[id] {
			absent = append(absent, id)
		}
	}
	for _, id := range m.out {
		if in[id] {
			present = append(present, id)
		}
	}
	extra := 0
	if m.exact {
		extra = len(current) - (len(m.in) - len(absent))
	}
	var parts []string
	if len(absent) > 0 {
		parts = append(parts, fmt.Sprintf("%d users are not members yet (%s)", len(absent), firstIDs(absent)))
	}
	if len(present) > 0 {
		parts = append(parts, fmt.Sprintf("%d users are still members (%s)", len(present), firstIDs(present)))
	}
	if extra > 0 {
		parts = append(parts, fmt.Sprintf("%d other users are still members", extra))
	}
	return strings.Join(parts, "; ")
}

func firstIDs(ids []string) string {
	if len(ids) > 3 {
		return strings.Join(ids[:3], ", ") + ", …"
	}
	return strings.Join(ids, ", ")
}

// groupCount is query's count of a group.
type groupCount struct {
	GroupID  string            `json:"groupId"`
	Total    uint64            `json:"total"`
	ByStatus map[string]uint64 `json:"byStatus"`
	Members  uint64            `json:"members"`
}

// countStatuses are the statuses of a count, in the order they are printed; invisible
// is in the operator view only.
func countStatuses() []string { return []string{"online", "idle", "invisible", "offline"} }

// line is the count for people: "team-a: 3 members, 1 online, 1 idle, 1 offline".
func (c groupCount) line() string {
	s := fmt.Sprintf("%s: %s", c.GroupID, plural(int(c.Members), "member"))
	for _, st := range countStatuses() {
		if n, ok := c.ByStatus[st]; ok {
			s += fmt.Sprintf(", %d %s", n, st)
		}
	}
	return s
}

func (g *groupsCmd) count(ctx context.Context) (groupCount, error) {
	var c groupCount
	err := g.c.get(ctx, g.path("/online/count"), nil, &c)
	return c, err
}

// show prints the group's counts and its members, or one of them.
func (g *groupsCmd) show(ctx context.Context, countOnly, asCSV bool) error {
	c, err := g.count(ctx)
	if err != nil {
		return err
	}
	counts := &table{header: []string{"STATUS", "USERS"}}
	for _, st := range countStatuses() {
		if n, ok := c.ByStatus[st]; ok {
			counts.add(st, fmtInt(n))
		}
	}
	counts.add("total", fmtInt(c.Total))
	counts.add("members", fmtInt(c.Members))
	if countOnly {
		return counts.print(g.stdout, asCSV)
	}
	ids, err := g.members(ctx)
	if err != nil {
		return err
	}
	members := &table{header: []string{"MEMBER"}}
	for _, id := range ids {
		members.add(id)
	}
	if !asCSV {
		if err := counts.print(g.stdout, false); err != nil {
			return err
		}
		fmt.Fprintln(g.stdout)
	}
	return members.print(g.stdout, asCSV)
}

// online prints the group's present members, following the listing's cursor.
func (g *groupsCmd) online(ctx context.Context, status string, limit int, asCSV bool) error {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if status != "" {
		q.Set("status", status)
	}
	t := &table{header: []string{"USER", "STATUS"}}
	for {
		var page onlinePage
		if err := g.c.get(ctx, g.path("/online"), q, &page); err != nil {
			return err
		}
		for _, u := range page.Users {
			t.add(u.UserID, u.Status)
		}
		if page.NextCursor == nil {
			return t.print(g.stdout, asCSV)
		}
		q.Set("cursor", *page.NextCursor)
	}
}
