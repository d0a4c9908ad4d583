package httpserver

import (
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Failed requests are logged in full for the first failureLogFirst, then at most once per
// failureLogInterval, each line counting the failures it stands for. An outage of a
// dependency under thousands of requests a second would otherwise write as many lines,
// and the logging would take CPU the requests need. Every failure is still counted, by
// route and status, in pulse_http_request_duration_seconds.
const (
	failureLogFirst    = 5
	failureLogInterval = time.Second
)

// failureLog writes the lines of failed requests, throttled as above.
type failureLog struct {
	logger    *slog.Logger
	sometimes rate.Sometimes
	unlogged  atomic.Int64 // failures since the last line
}

func newFailureLog(logger *slog.Logger) *failureLog {
	return &failureLog{logger: logger, sometimes: rate.Sometimes{First: failureLogFirst, Interval: failureLogInterval}}
}

// log records one failed request and writes its line when the throttle allows.
func (f *failureLog) log(method, route string, err error) {
	f.unlogged.Add(1)
	f.sometimes.Do(func() {
		n := f.unlogged.Swap(0)
		attrs := []any{"method", method, "route", route, "err", err}
		if n > 1 {
			attrs = append(attrs, "failures_since_last_line", n)
		}
		f.logger.Error("request failed", attrs...)
	})
}
