package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/pkg/presence"
	"github.com/pulse-presence/pulse/pkg/presence/presencetest"
)

// TestInvisibleLooksExactlyLikeOffline sends random sequences of statuses (invisible
// among them), heartbeats and activity on three devices for several users through the
// real pipeline, and for each user a twin the events of presencetest.TwinEvents: the
// same user but offline wherever the first is invisible. At checkpoints along the way,
// once both are applied, every answer a reader key gets about them — GET /status,
// POST /statuses, GET /v1/users/{id}/status, a feed snapshot — must be byte-identical
// but for the user id, and so must the feed's changes of the whole run. Timeouts are
// off here (a slow machine would race them); their part of the rule is checked by
// TestInvisibleReadsAsATwinWhoWasOffline (pkg/presence) through the same
// presencetest.TwinEvents.
func TestInvisibleLooksExactlyLikeOffline(t *testing.T) {
	p := newPipeline(t, 4, nil)
	const (
		pairs       = 8
		steps       = 36
		checkpoints = 3
	)
	type pair struct {
		id, twinID string
		u, twin    *presence.User
		evs        [][]wireEvent // per checkpoint: the user's and the twin's events, in order
		twinEvs    [][]wireEvent
	}
	devices := []string{"phone", "laptop", "tablet"}
	statuses := []presence.Status{presence.Online, presence.Idle, presence.Offline, presence.Invisible, presence.Invisible}
	// Client times: in the past, within ingest's allowed skew, a few seconds apart.
	base := time.Now().Add(-3 * time.Minute).Truncate(time.Millisecond)
	var ps []*pair
	for k := range pairs {
		rng := rand.New(rand.NewPCG(uint64(k), 25))
		pr := &pair{id: fmt.Sprintf("inv-%s-%d", p.run, k), twinID: fmt.Sprintf("twn-%s-%d", p.run, k),
			u: presence.NewUser(0), twin: presence.NewUser(0)}
		now := base
		for range checkpoints {
			var evs, twinEvs []wireEvent
			for range steps / checkpoints {
				now = now.Add(time.Duration(200+rng.IntN(3000)) * time.Millisecond)
				e := &presence.Event{UserID: pr.id, DeviceID: devices[rng.IntN(len(devices))], OccurredAt: now, ReceivedAt: now, Source: presence.SourceAPI}
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
	watchDialWS(t, ctx, watchURL(p.svc["query"].url, "/v1/watch", url.Values{"userIds": {strings.Join(ids, ",")}}), feed)

	q := p.svc["query"].url
	for c := range checkpoints {
		// Post this part of every sequence, and remember each user's last event time.
		want := map[string]time.Time{}
		for _, pr := range ps {
			for _, pair := range [][]wireEvent{pr.evs[c], pr.twinEvs[c]} {
				if len(pair) == 0 {
					continue
				}
				code, body := postJSON(t, p.svc["ingest"].url+"/v1/events", map[string]any{"events": pair})
				if code != http.StatusAccepted {
					t.Fatalf("POST /v1/events = %d %s", code, body)
				}
				want[pair[0].UserID] = *pair[len(pair)-1].OccurredAt
			}
		}
		// Applied: the operator view shows each user's last event.
		eventually(t, 30*time.Second, func() string {
			for id, last := range want {
				code, body := onlineDo(t, http.MethodGet, q+"/v1/users/"+id+"/status?view=operator", testKeys.operator, nil)
				if code != http.StatusOK || !strings.Contains(string(body), `"lastSeen":"`+last.UTC().Format(time.RFC3339Nano)+`"`) {
					return fmt.Sprintf("%s not applied through %v yet: %d %s", id, last, code, body)
				}
			}
			return ""
		})
		for _, pr := range ps {
			for _, read := range []func(id string) string{
				func(id string) string { _, b := get(t, q+"/status/"+id); return b },
				func(id string) string { _, b := get(t, q+"/v1/users/"+id+"/status"); return b },
				func(id string) string {
					_, b := postJSON(t, q+"/statuses", map[string]any{"userIds": []string{id}})
					return string(b)
				},
			} {
				got, twin := read(pr.id), read(pr.twinID)
				if strings.ReplaceAll(got, pr.id, "ID") != strings.ReplaceAll(twin, pr.twinID, "ID") {
					t.Errorf("checkpoint %d: a reader tells %s from its twin:\n  %s\n  %s", c, pr.id, got, twin)
				}
			}
			snap := newWatchLog()
			w := watchDialWS(t, ctx, watchURL(q, "/v1/watch", url.Values{"userIds": {pr.id + "," + pr.twinID}}), snap)
			eventually(t, 10*time.Second, func() string {
				if _, n, _ := snap.counts(); n == 0 {
					return "no snapshot yet"
				}
				return ""
			})
			_ = w.conn.CloseNow()
			st := snap.snapshots[0].Statuses
			if len(st) != 2 || st[0].Status != st[1].Status || fmt.Sprint(st[0].LastUpdated) != fmt.Sprint(st[1].LastUpdated) {
				t.Errorf("checkpoint %d: the feed's snapshot tells %s from its twin: %+v", c, pr.id, st)
			}
		}
	}
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

// toWire is e as a client posts it; ingest gives it an id.
func toWire(e *presence.Event) wireEvent {
	at := e.OccurredAt
	w := wireEvent{UserID: e.UserID, Kind: e.Kind.String(), DeviceID: e.DeviceID, OccurredAt: &at}
	if e.Kind == presence.KindStatus {
		w.Status = e.Status.String()
	}
	return w
}
