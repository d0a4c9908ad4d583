package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/presence/presencetest"
	"github.com/pulse-presence/pulse/tests/harness"
)

// TestInvisibleLooksExactlyLikeOffline sends random sequences of statuses (invisible
// among them), heartbeats and activity on three devices, each with a clock off by its
// own few seconds, for several users through the real pipeline, and for each user a
// twin the events of presencetest.TwinEvents: the same user but offline wherever the
// first is invisible. At checkpoints along the way, once both are applied, every
// answer a reader key gets about them — GET /status, POST /statuses,
// GET /v1/users/{id}/status, a feed snapshot — must be byte-identical but for the user
// id. Then the aggregator's idle and offline timeouts, decided on each user's own
// basis, take every device offline, and the same holds again, as it does for the
// feed's changes of the whole run. The timeouts fall due only once every event is
// in, so they never race the events.
func TestInvisibleLooksExactlyLikeOffline(t *testing.T) {
	// The events are dated 4.5 to about 3.3 minutes ago: idle timeouts fall due 5
	// minutes after a user's last activity, offline ones 5.5 minutes after a device's
	// last event, from lead after the test posts its first event. The test waits for
	// the last of them, so every second of lead is a second of the run: posting and
	// applying the three checkpoints takes about 3 s on the single stack, and lead
	// leaves room for a slower machine (the check below fails the test, rather than
	// letting the timeouts race the events, when lead falls short).
	const idleAfter, offlineAfter = 5 * time.Minute, 5*time.Minute + 30*time.Second
	const lead = 30 * time.Second
	p := harness.NewPipeline(t, 4, map[string]string{"PULSE_IDLE_AFTER": idleAfter.String(), "PULSE_OFFLINE_AFTER": offlineAfter.String()})
	const (
		pairs       = 8
		steps       = 36
		checkpoints = 3
	)
	type pair struct {
		id, twinID string
		u, twin    *presence.User
		evs        [][]harness.WireEvent // per checkpoint: the user's and the twin's events, in order
		twinEvs    [][]harness.WireEvent
		// at is u and twin as they are after each checkpoint's events.
		at, twinAt []presence.User
	}
	devices := []string{"phone", "laptop", "tablet"}
	statuses := []presence.Status{presence.Online, presence.Idle, presence.Offline, presence.Invisible, presence.Invisible}
	// Client times: in the past, within ingest's allowed skew, a few seconds apart.
	base := time.Now().Add(-(idleAfter - lead)).Truncate(time.Millisecond)
	var ps []*pair
	for k := range pairs {
		rng := rand.New(rand.NewPCG(uint64(k), 25))
		pr := &pair{id: fmt.Sprintf("inv-%s-%d", p.Run, k), twinID: fmt.Sprintf("twn-%s-%d", p.Run, k),
			u: presence.NewUser(0), twin: presence.NewUser(0)}
		now := base
		skew := map[string]time.Duration{}
		for _, d := range devices {
			skew[d] = time.Duration(rng.IntN(6000)-3000) * time.Millisecond
		}
		for range checkpoints {
			var evs, twinEvs []harness.WireEvent
			for range steps / checkpoints {
				now = now.Add(time.Duration(200+rng.IntN(3000)) * time.Millisecond)
				dev := devices[rng.IntN(len(devices))]
				e := &presence.Event{UserID: pr.id, DeviceID: dev, OccurredAt: now.Add(skew[dev]), ReceivedAt: now, Source: presence.SourceAPI}
				switch k := rng.IntN(10); {
				case k < 5:
					e.Kind, e.Status = presence.KindStatus, statuses[rng.IntN(len(statuses))]
				case k < 8:
					e.Kind = presence.KindHeartbeat
				default:
					e.Kind = presence.KindActivity
				}
				out := pr.u.Apply(e)
				evs = append(evs, toWire(e))
				for _, te := range presencetest.TwinEvents(pr.twinID, e, out, pr.u, pr.twin) {
					pr.twin.Apply(te)
					twinEvs = append(twinEvs, toWire(te))
				}
			}
			pr.evs, pr.twinEvs = append(pr.evs, evs), append(pr.twinEvs, twinEvs)
			pr.at, pr.twinAt = append(pr.at, snapshotUser(pr.u)), append(pr.twinAt, snapshotUser(pr.twin))
		}
		ps = append(ps, pr)
	}

	// A reader's feed of every user, for the changes of the whole run.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var ids []string
	for _, pr := range ps {
		ids = append(ids, pr.id, pr.twinID)
	}
	feed := newWatchLog()
	watchDialWS(t, ctx, watchURL(p.Svc["query"].URL, "/v1/watch", url.Values{"userIds": {strings.Join(ids, ",")}}), feed)

	q := p.Svc["query"].URL
	// compare asks every reader's answer about each user and its twin; name says when.
	compare := func(name string) {
		for _, pr := range ps {
			for _, read := range []func(id string) string{
				func(id string) string { _, b := harness.Get(t, q+"/status/"+id); return b },
				func(id string) string { _, b := harness.Get(t, q+"/v1/users/"+id+"/status"); return b },
				func(id string) string {
					_, b := harness.PostJSON(t, q+"/statuses", map[string]any{"userIds": []string{id}})
					return string(b)
				},
			} {
				got, twin := read(pr.id), read(pr.twinID)
				if strings.ReplaceAll(got, pr.id, "ID") != strings.ReplaceAll(twin, pr.twinID, "ID") {
					t.Errorf("%s: a reader tells %s from its twin:\n  %s\n  %s", name, pr.id, got, twin)
				}
			}
			snap := newWatchLog()
			w := watchDialWS(t, ctx, watchURL(q, "/v1/watch", url.Values{"userIds": {pr.id + "," + pr.twinID}}), snap)
			harness.Eventually(t, 10*time.Second, func() string {
				if _, n, _ := snap.counts(); n == 0 {
					return "no snapshot yet"
				}
				return ""
			})
			_ = w.conn.CloseNow()
			st := snap.snapshots[0].Statuses
			if len(st) != 2 || st[0].Status != st[1].Status || fmt.Sprint(st[0].LastUpdated) != fmt.Sprint(st[1].LastUpdated) {
				t.Errorf("%s: the feed's snapshot tells %s from its twin: %+v", name, pr.id, st)
			}
		}
	}
	for c := range checkpoints {
		// Post this part of every sequence.
		for _, pr := range ps {
			for _, pair := range [][]harness.WireEvent{pr.evs[c], pr.twinEvs[c]} {
				if len(pair) == 0 {
					continue
				}
				code, body := harness.PostJSON(t, p.Svc["ingest"].URL+"/v1/events", map[string]any{"events": pair})
				if code != http.StatusAccepted {
					t.Fatalf("POST /v1/events = %d %s", code, body)
				}
			}
		}
		// Applied: the operator view is each user's state after them (an event not
		// yet applied would show in it, as a device's last-seen at least).
		harness.Eventually(t, 30*time.Second, func() string {
			for _, pr := range ps {
				if d := operatorDiff(t, q, pr.id, &pr.at[c]); d != "" {
					return d
				}
				if d := operatorDiff(t, q, pr.twinID, &pr.twinAt[c]); d != "" {
					return d
				}
			}
			return ""
		})
		if time.Since(base) > idleAfter-5*time.Second {
			t.Fatalf("checkpoint %d applied %v after the first event: timeouts may have fallen due among the events; the machine is too slow for this test", c, time.Since(base).Round(time.Second))
		}
		if c == checkpoints-1 {
			t.Logf("the checkpoints were applied %v into the %v lead", (time.Since(base) - (idleAfter - lead)).Round(100*time.Millisecond), lead)
		}
		compare(fmt.Sprintf("checkpoint %d", c))
	}
	// The timeouts: every device of every user and twin times out.
	harness.Eventually(t, offlineAfter, func() string {
		for _, pr := range ps {
			for _, id := range []string{pr.id, pr.twinID} {
				code, body := harness.OnlineDo(t, http.MethodGet, q+"/v1/users/"+id+"/status?view=operator", harness.TestKeys.Operator, nil)
				if code != http.StatusOK || strings.Contains(string(body), `"status":"online"`) || strings.Contains(string(body), `"status":"idle"`) {
					return fmt.Sprintf("%s not timed out yet: %d %s", id, code, body)
				}
			}
		}
		return ""
	})
	compare("after the timeouts")
	// The public changes of each user and its twin, in order.
	feed.mu.Lock()
	defer feed.mu.Unlock()
	for _, pr := range ps {
		show := func(ms []watchMsg) string {
			var out []string
			for _, m := range ms {
				out = append(out, fmt.Sprintf("%s→%s at %s (%s)", m.Previous, m.Status, m.At.Format(time.RFC3339Nano), m.Cause))
			}
			return strings.Join(out, "; ")
		}
		if got, twin := show(feed.changes[pr.id]), show(feed.changes[pr.twinID]); got != twin {
			t.Errorf("the feed tells %s from its twin:\n  %s\n  %s", pr.id, got, twin)
		}
	}
}

// snapshotUser is a copy of u's state now.
func snapshotUser(u *presence.User) presence.User {
	c := *u
	c.Devices = slices.Clone(u.Devices)
	return c
}

// operatorDiff says how the operator's view of id differs from u, the state the
// test's own fold gives; empty when it does not.
func operatorDiff(t *testing.T, query, id string, u *presence.User) string {
	t.Helper()
	code, body := harness.OnlineDo(t, http.MethodGet, query+"/v1/users/"+id+"/status?view=operator", harness.TestKeys.Operator, nil)
	var v struct {
		Status                            string
		LastUpdated, LastActive, LastSeen *time.Time
		Devices                           []struct {
			DeviceID string
			Status   string
			LastSeen time.Time
		}
	}
	if code != http.StatusOK || json.Unmarshal(body, &v) != nil {
		return fmt.Sprintf("%s: %d %s", id, code, body)
	}
	at := func(p *time.Time) time.Time {
		if p == nil {
			return time.Time{}
		}
		return *p
	}
	got := fmt.Sprintf("%s updated %v active %v seen %v", v.Status, at(v.LastUpdated).UTC(), at(v.LastActive).UTC(), at(v.LastSeen).UTC())
	want := fmt.Sprintf("%s updated %v active %v seen %v", u.Status, u.LastUpdated.UTC(), u.LastActive.UTC(), u.LastSeen.UTC())
	for _, d := range v.Devices {
		got += fmt.Sprintf(" %s %s %v", d.DeviceID, d.Status, d.LastSeen.UTC())
	}
	for _, d := range u.Devices {
		want += fmt.Sprintf(" %s %s %v", d.ID, d.Status, d.LastSeen.UTC())
	}
	if got != want {
		return fmt.Sprintf("%s not applied yet:\n  %s\nwant\n  %s", id, got, want)
	}
	return ""
}

// toWire is e as a client posts it; ingest gives it an id.
func toWire(e *presence.Event) harness.WireEvent {
	at := e.OccurredAt
	w := harness.WireEvent{UserID: e.UserID, Kind: e.Kind.String(), DeviceID: e.DeviceID, OccurredAt: &at}
	if e.Kind == presence.KindStatus {
		w.Status = e.Status.String()
	}
	return w
}
