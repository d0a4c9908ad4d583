package feed

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Errors a resume that needs the log gets when no replay slot frees up within
// Config.ReplayWait. ErrPrincipalReplaysBusy is an ErrReplaysBusy too.
var (
	// ErrReplaysBusy: the instance runs its Config.MaxLogReplays replays; retry
	// later or elsewhere.
	ErrReplaysBusy = errors.New("the instance's log replays are busy")
	// ErrPrincipalReplaysBusy: the principal runs its
	// Config.MaxLogReplaysPerPrincipal replays; retry once one has finished.
	ErrPrincipalReplaysBusy = &principalBusy{}
)

type principalBusy struct{}

func (*principalBusy) Error() string        { return "the principal's log replays are busy" }
func (*principalBusy) Is(target error) bool { return target == ErrReplaysBusy }

// replaySlots bound the resumes reading Kafka: at most max at once on the instance,
// perPrincipal of them for one principal (a key, a user token), so that one client
// reconnecting many streams with old cursors cannot take every slot from the others.
type replaySlots struct {
	max, perPrincipal int

	mu    sync.Mutex
	n     int
	by    map[string]int // running replays by principal; no entry at 0
	freed chan struct{}  // closed and replaced whenever a slot is given back
}

func newReplaySlots(max, perPrincipal int) *replaySlots {
	return &replaySlots{max: max, perPrincipal: perPrincipal, by: make(map[string]int), freed: make(chan struct{})}
}

// acquire takes a slot for principal, waiting up to wait for one to free up. It
// fails with ErrPrincipalReplaysBusy or ErrReplaysBusy (whichever bound was full
// last) when none did, with the cause of gone when gone ends first, or ctx's error.
func (r *replaySlots) acquire(ctx context.Context, gone context.Context, principal string, wait time.Duration) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		ok, freed, full := r.try(principal)
		if ok {
			return nil
		}
		select {
		case <-freed:
		case <-t.C:
			return full
		case <-ctx.Done():
			return ctx.Err()
		case <-gone.Done():
			return context.Cause(gone)
		}
	}
}

// try takes a slot if both bounds allow; otherwise it says which is full and
// returns the channel closed when a slot is next given back.
func (r *replaySlots) try(principal string) (bool, <-chan struct{}, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.by[principal] >= r.perPrincipal:
		return false, r.freed, ErrPrincipalReplaysBusy
	case r.n >= r.max:
		return false, r.freed, ErrReplaysBusy
	}
	r.n++
	r.by[principal]++
	return true, nil, nil
}

// release gives principal's slot back and wakes the waiters.
func (r *replaySlots) release(principal string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n--
	if r.by[principal]--; r.by[principal] <= 0 {
		delete(r.by, principal)
	}
	close(r.freed)
	r.freed = make(chan struct{})
}

// running is how many replays run, on the instance and for principal.
func (r *replaySlots) running(principal string) (all, mine int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n, r.by[principal]
}
