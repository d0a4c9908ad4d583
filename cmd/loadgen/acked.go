package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/pulse-presence/pulse/cmd/internal/eventgen"
)

// AckedEvent is one line of the -acked file: an event ingest answered with a 2xx,
// which ingest only sends once Kafka has acknowledged the event. Lines are written as
// answers arrive, warm-up included, so the file lists every event of the run that
// must be in presence.events.
//
//	eventId   the id ingest answered with ("" for POST /status, whose answer names none)
//	userId    as sent
//	deviceId  as sent ("" for POST /status: ingest uses its default device)
//	kind      status, heartbeat or activity
//	status    the status of a status event, else ""
//	workload  the workload that sent it: single, batch, heartbeat or fresh
type AckedEvent struct {
	EventID  string `json:"eventId"`
	UserID   string `json:"userId"`
	DeviceID string `json:"deviceId"`
	Kind     string `json:"kind"`
	Status   string `json:"status"`
	Workload string `json:"workload"`
}

// IngestCounts are the events of every ingest workload over the whole run, warm-up
// included, by what became of them. offered = acknowledged + the refused + unanswered.
//
//	offered       events in requests that were sent (a dropped request offers none)
//	acknowledged  events in 2xx answers: the lines of the -acked file
//	refused       events in answers of another status, by status code ({"503": 300})
//	unanswered    events of requests without a usable answer (connection error,
//	              timeout, an unreadable 2xx, an abort at Ctrl-C): they may or may not
//	              be in the log
type IngestCounts struct {
	Offered      uint64            `json:"offered"`
	Acknowledged uint64            `json:"acknowledged"`
	Refused      map[string]uint64 `json:"refused"`
	Unanswered   uint64            `json:"unanswered"`
}

// RefusedTotal is every refused event, whatever the status code.
func (c IngestCounts) RefusedTotal() uint64 {
	var n uint64
	for _, v := range c.Refused {
		n += v
	}
	return n
}

// ledger counts the events of every ingest request and, with -acked, writes each
// acknowledged one as a JSON line. It is safe for concurrent use.
type ledger struct {
	mu     sync.Mutex
	counts IngestCounts
	// used is whether any ingest request was recorded.
	used bool
	file *os.File
	w    *bufio.Writer
	enc  *json.Encoder
	err  error // the first write error
}

// newLedger returns a ledger writing to path, or only counting when path is "".
func newLedger(path string) (*ledger, error) {
	l := &ledger{counts: IngestCounts{Refused: map[string]uint64{}}}
	if path == "" {
		return l, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-acked: %w", err)
	}
	l.file, l.w = f, bufio.NewWriterSize(f, 64<<10)
	l.enc = json.NewEncoder(l.w)
	return l, nil
}

// record adds one request's events and its outcome; ids are the event ids of a 2xx
// answer, in the order of events (missing ones are written as "").
func (l *ledger) record(workload string, o outcome, events []eventgen.Event, ids []string) {
	if l == nil {
		return
	}
	if o.class == classDropped {
		return // never sent: nothing offered
	}
	n := uint64(len(events))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.used = true
	l.counts.Offered += n
	switch o.class {
	case classOK:
		l.counts.Acknowledged += n
		if l.enc == nil || l.err != nil {
			return
		}
		for i, e := range events {
			a := AckedEvent{UserID: e.UserID, DeviceID: e.DeviceID, Kind: e.Kind, Status: e.Status, Workload: workload}
			if i < len(ids) {
				a.EventID = ids[i]
			}
			if err := l.enc.Encode(a); err != nil {
				l.err = err
				return
			}
		}
	case class4xx, class5xx:
		l.counts.Refused[strconv.Itoa(o.code)] += n
	default:
		l.counts.Unanswered += n
	}
}

// snapshot returns the counts so far, or nil when no ingest request was made.
func (l *ledger) snapshot() *IngestCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.used {
		return nil
	}
	c := l.counts
	c.Refused = maps.Clone(l.counts.Refused)
	return &c
}

// close flushes and closes the -acked file and reports the first error writing it.
func (l *ledger) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file == nil {
		return nil
	}
	err := errors.Join(l.err, l.w.Flush(), l.file.Close())
	l.file = nil
	if err != nil {
		return fmt.Errorf("writing the -acked file: %w", err)
	}
	return nil
}

// writeIngestLine prints the whole run's ingest counts for people.
func writeIngestLine(w io.Writer, c *IngestCounts) {
	if c == nil {
		return
	}
	refused := ""
	if c.RefusedTotal() > 0 {
		refused = " (" + strings.Join(codeCounts(c.Refused), ", ") + ")"
	}
	fmt.Fprintf(w, "\ningest events, whole run: offered %d, acknowledged %d, refused %d%s, unanswered %d\n",
		c.Offered, c.Acknowledged, c.RefusedTotal(), refused, c.Unanswered)
}
