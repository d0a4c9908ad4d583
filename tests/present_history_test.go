package tests

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/tests/harness"
)

// TestHistoryIsTheSameThroughASocketAndHTTP: two users live the same minute side by
// side, one through a present socket (its pings as heartbeats, its commands, a client
// close), the other through ingest's HTTP routes (heartbeats every PULSE_PRESENT_HEARTBEAT,
// the same statuses, an offline post). History cannot tell them apart: the same
// transitions in their timelines, one closed session each with the same bounds and
// totals, the same day rollups — up to the milliseconds between the two doors.
func TestHistoryIsTheSameThroughASocketAndHTTP(t *testing.T) {
	const offlineAfter, heartbeat = 3 * time.Second, 500 * time.Millisecond
	// The timing allowed between the two users: a step's two requests, each acked by Kafka.
	const slack = 400 * time.Millisecond
	p := harness.NewPipeline(t, 2, map[string]string{
		"PULSE_OFFLINE_AFTER":     offlineAfter.String(),
		"PULSE_PRESENT_HEARTBEAT": heartbeat.String(),
		// History writes the sessions and day rollups within a second of folding the
		// changes, rather than after PULSE_HISTORY_ROLLUP_INTERVAL's default 30 s,
		// which the test would only wait out.
		"PULSE_HISTORY_ROLLUP_INTERVAL": "1s",
	})
	q := p.Svc["query"].URL
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sock, web := p.Run+"-sock", p.Run+"-http"
	tok, err := auth.MintUserToken(harness.TestKeys.Hs256, auth.UserToken{User: sock, TTL: time.Hour, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}

	var s *liveSocket
	harness.Eventually(t, 30*time.Second, func() string {
		c, res, err := openSocket(t, ctx, q, tok, url.Values{"present": {"web"}})
		if err != nil {
			return fmt.Sprintf("present socket: %v (%v)", err, res)
		}
		s = c
		return ""
	})
	p.Send(t, web, "heartbeat", "", "web")
	stopBeats := make(chan struct{})
	beatsDone := make(chan struct{})
	go func() {
		defer close(beatsDone)
		tick := time.NewTicker(heartbeat)
		defer tick.Stop()
		for {
			select {
			case <-stopBeats:
				return
			case <-tick.C:
				p.Send(t, web, "heartbeat", "", "web")
			}
		}
	}()
	command := func(cmd, op string) {
		t.Helper()
		s.send(cmd)
		for {
			m := s.next(10 * time.Second)
			if m.Type == "snapshot" {
				continue
			}
			if m.Type != "ack" || m.Op != op {
				t.Fatalf("%s answered %+v %s", cmd, m.watchMsg, m.Message)
			}
			return
		}
	}
	time.Sleep(offlineAfter + 2*time.Second) // both stay online past PULSE_OFFLINE_AFTER
	command(`{"op":"status","status":"idle"}`, "status")
	p.Send(t, web, "status", "idle", "web")
	time.Sleep(2 * time.Second)
	command(`{"op":"activity"}`, "activity")
	p.Send(t, web, "activity", "", "web")
	time.Sleep(time.Second)
	close(stopBeats)
	<-beatsDone
	if err := s.conn.Close(1000, "logged out"); err != nil {
		t.Fatalf("closing the socket: %v", err)
	}
	p.Send(t, web, "status", "offline", "web")

	day := time.Now().UTC()
	from, to := day.AddDate(0, 0, -1).Format(time.DateOnly), day.AddDate(0, 0, 1).Format(time.DateOnly)
	sessionsOf := func(user string) []hapiSession {
		var ans struct {
			Sessions []hapiSession `json:"sessions"`
		}
		hapiGet(t, q+"/v1/users/"+user+"/sessions?from="+from+"&to="+to, &ans)
		return ans.Sessions
	}
	var ss, hs []hapiSession
	harness.Eventually(t, 30*time.Second, func() string {
		ss, hs = sessionsOf(sock), sessionsOf(web)
		if len(ss) != 1 || len(hs) != 1 || ss[0].Open || hs[0].Open {
			return fmt.Sprintf("sessions: socket %+v, http %+v; want one closed each", ss, hs)
		}
		return ""
	})
	near := func(what string, a, b time.Duration) {
		t.Helper()
		if d := a - b; d > slack || d < -slack {
			t.Errorf("%s: socket %v, http %v: %v apart, more than %v", what, a, b, d, slack)
		}
	}
	secs := func(f float64) time.Duration { return time.Duration(math.Round(f * float64(time.Second))) }
	t.Logf("session through the socket %+v; through HTTP %+v", ss[0], hs[0])
	near("session start", 0, hs[0].Start.Sub(ss[0].Start))
	near("session end", 0, hs[0].End.Sub(*ss[0].End))
	near("online time", secs(ss[0].OnlineSeconds), secs(hs[0].OnlineSeconds))
	near("idle time", secs(ss[0].IdleSeconds), secs(hs[0].IdleSeconds))
	if ss[0].IdleSeconds < 1.5 || ss[0].OnlineSeconds < offlineAfter.Seconds()+2 {
		t.Errorf("socket session %+v: want at least 1.5 s idle and %v online", ss[0], offlineAfter+2*time.Second)
	}

	transitions := func(user string) []string {
		var ans struct {
			Entries []hapiEntry `json:"entries"`
		}
		hapiGet(t, q+"/v1/users/"+user+"/timeline?from="+from+"&to="+to+"&limit=1000", &ans)
		var out []string
		for _, e := range slices.Backward(ans.Entries) { // oldest first
			if e.EntryType == "change" {
				out = append(out, e.PreviousStatus+"→"+e.Status+" ("+e.Cause+")")
			}
		}
		return out
	}
	want := []string{"offline→online (event)", "online→idle (event)", "idle→online (event)", "online→offline (event)"}
	if got := transitions(sock); !slices.Equal(got, want) {
		t.Errorf("socket user's transitions %v, want %v", got, want)
	}
	if got := transitions(web); !slices.Equal(got, want) {
		t.Errorf("http user's transitions %v, want %v", got, want)
	}

	dayOf := func(user string) hapiDay {
		var ans struct {
			Days []hapiDay `json:"days"`
		}
		hapiGet(t, q+"/v1/users/"+user+"/daily?from="+day.Format(time.DateOnly)+"&to="+day.Format(time.DateOnly), &ans)
		if len(ans.Days) != 1 {
			t.Fatalf("%s's days: %+v, want today's", user, ans.Days)
		}
		return ans.Days[0]
	}
	var sd, hd hapiDay
	harness.Eventually(t, 30*time.Second, func() string {
		sd, hd = dayOf(sock), dayOf(web)
		if sd.Status != "offline" || hd.Status != "offline" {
			return fmt.Sprintf("days not closed yet: %+v, %+v", sd, hd)
		}
		return ""
	})
	if sd.Sessions != 1 || hd.Sessions != 1 {
		t.Errorf("sessions of the day: socket %d, http %d; want 1 each", sd.Sessions, hd.Sessions)
	}
	near("day's online time", secs(sd.OnlineSeconds), secs(hd.OnlineSeconds))
	near("day's idle time", secs(sd.IdleSeconds), secs(hd.IdleSeconds))
}
