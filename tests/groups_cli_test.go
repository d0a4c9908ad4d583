package tests

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

// TestPulsectlGroups runs pulsectl groups against a pipeline of its own: users with
// known statuses posted through ingest, then set, add, remove, show, online and
// delete, each printing exactly what query posted and, with -wait, the counts once
// the aggregator folded the write. Member listings come in the state's order, which
// the test does not know, so they are compared sorted.
func TestPulsectlGroups(t *testing.T) {
	p := harness.NewTopics(t, 2)
	for _, name := range []string{"aggregator", "ingest", "query"} {
		p.Start(t, name)
	}
	query, ingest := p.Svc["query"].URL, p.Svc["ingest"].URL
	u := func(i int) string { return fmt.Sprintf("gc-%s-%d", p.Run, i) }
	var events []harness.WireEvent
	for i, st := range []string{"online", "online", "idle", "invisible", "offline"} {
		events = append(events, harness.WireEvent{UserID: u(i), Kind: "status", Status: st, DeviceID: "web"})
	}
	if err := onlinePost(ingest, events); err != nil {
		t.Fatal(err)
	}
	// The pipeline's Redis prefix is its own: its counts are these users'.
	harness.Eventually(t, 30*time.Second, func() string {
		code, body := harness.OnlineDo(t, http.MethodGet, query+"/v1/online/count?view=operator", harness.TestKeys.Operator, nil)
		if want := `"byStatus":{"idle":1,"invisible":1,"offline":1,"online":2}`; code != http.StatusOK || !strings.Contains(string(body), want) {
			return fmt.Sprintf("count = %d %s, want %s", code, body, want)
		}
		return ""
	})

	g := "team-" + p.Run
	reader := []string{"PULSE_READER_KEY=" + harness.TestKeys.Reader}
	operator := []string{"PULSE_OPERATOR_KEY=" + harness.TestKeys.Operator}
	run := func(env []string, stdin string, args ...string) (string, string, error) {
		t.Helper()
		cmd := exec.Command(harness.Binary("pulsectl"), append([]string{"groups"}, args...)...)
		cmd.Env = append(cmd.Environ(), "PULSE_QUERY_URL="+query, "PULSE_PRODUCER_KEY="+harness.TestKeys.Producer,
			"PULSE_READER_KEY=", "PULSE_OPERATOR_KEY=", "PULSE_OPERATOR_TOKEN=")
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	must := func(env []string, stdin string, args ...string) string {
		t.Helper()
		out, errOut, err := run(env, stdin, args...)
		if err != nil {
			t.Fatalf("pulsectl groups %v: %v\n%s%s", args, err, out, errOut)
		}
		return out
	}
	expect := func(env []string, stdin, want string, args ...string) {
		t.Helper()
		if got := must(env, stdin, args...); got != want {
			t.Errorf("pulsectl groups %v =\n%s\nwant\n%s", args, got, want)
		}
	}
	file := filepath.Join(t.TempDir(), "users.txt")
	if err := os.WriteFile(file, []byte(u(2)+"\n"+u(3)+"\n\n"+u(4)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// set from arguments and a file; readers see the invisible user as offline.
	expect(reader, "", fmt.Sprintf("posted 5 joins, 0 leaves to %s\n%s: 5 members, 2 online, 1 idle, 2 offline\n", g, g),
		"set", g, u(0), u(1), "-file", file, "-wait")
	// PATCH posts a join for every id, members or not.
	expect(reader, u(5)+"\n", fmt.Sprintf("posted 2 joins, 0 leaves to %s\n%s: 6 members, 2 online, 1 idle, 3 offline\n", g, g),
		"add", g, u(0), "-file", "-", "-wait")
	expect(operator, "", fmt.Sprintf("posted 0 joins, 1 leave to %s\n%s: 5 members, 1 online, 1 idle, 1 invisible, 2 offline\n", g, g),
		"remove", g, u(1), "-wait")

	// show: the counts, then the members.
	out := must(reader, "", "show", g)
	head, members, ok := strings.Cut(out, "\n\n")
	if want := "STATUS   USERS\nonline   1\nidle     1\noffline  3\ntotal    2\nmembers  5"; !ok || head != want {
		t.Errorf("show's counts =\n%s\nwant\n%s", head, want)
	}
	lines := strings.Split(strings.TrimSuffix(members, "\n"), "\n")
	slices.Sort(lines[1:])
	if want := []string{"MEMBER", u(0), u(2), u(3), u(4), u(5)}; !slices.Equal(lines, want) {
		t.Errorf("show's members = %q, want %q", lines, want)
	}
	expect(operator, "", "STATUS,USERS\nonline,1\nidle,1\ninvisible,1\noffline,2\ntotal,3\nmembers,5\n", "show", g, "-count", "-csv")

	// online: the present members, through the cursor.
	out = must(operator, "", "online", g, "-csv", "-limit", "1")
	lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	slices.Sort(lines[1:])
	if want := []string{"USER,STATUS", u(0) + ",online", u(2) + ",idle", u(3) + ",invisible"}; !slices.Equal(lines, want) {
		t.Errorf("online -csv = %q, want %q", lines, want)
	}
	expect(reader, "", fmt.Sprintf("USER%s  STATUS\n%s  idle\n", strings.Repeat(" ", len(u(2))-len("USER")), u(2)), "online", g, "-status", "idle")

	// set replaces: query posts the difference.
	expect(reader, "", fmt.Sprintf("posted 1 join, 4 leaves to %s\n%s: 2 members, 1 online, 0 idle, 1 offline\n", g, g),
		"set", g, u(0), u(9), "-wait")
	// More ids than one request takes: the difference, in PATCHes.
	expect(reader, "", fmt.Sprintf("posted 2 joins, 1 leave to %s in 2 requests\n%s: 3 members, 2 online, 1 idle, 0 offline\n", g, g),
		"set", g, u(0), u(1), u(2), "-batch", "2", "-wait")
	expect(reader, "", fmt.Sprintf("posted 0 joins, 3 leaves to %s\n%s: 0 members, 0 online, 0 idle, 0 offline\n", g, g),
		"delete", g, "-wait")
	expect(reader, "", "MEMBER\n", "show", g, "-csv")

	// Refusals: the message and exit status 1, nothing on stdout.
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{reader, []string{"set", "team a", u(0)}, `pulsectl: group id "team a": must be ASCII letters, digits and - _ . : @ only, got ' ' at byte 4`},
		{append(reader, "PULSE_PRODUCER_KEY="+harness.TestKeys.Reader), []string{"add", g, u(0)},
			"pulsectl: PATCH /v1/groups/" + g + "/members: 403 key " + "it-reader" + ` has scopes "read"; PATCH /v1/groups/:groupId/members needs write (PULSE_PRODUCER_KEY must be an API key with the write scope)`},
		{nil, []string{"online", g}, "pulsectl: /v1/groups/" + g + "/online: 401 "},
	} {
		out, errOut, err := run(c.env, "", c.args...)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || out != "" || !strings.HasPrefix(errOut, c.want) {
			t.Errorf("pulsectl groups %q: %v, stdout %q, stderr %q; want exit 1 and %q", c.args, err, out, errOut, c.want)
		}
	}
}
