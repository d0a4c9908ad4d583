package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Loops are a service's background loops (key-file watchers, the feed's hub, caches):
// each runs until the context Loops gives it ends, and Stop ends them all and waits
// for every one. A service starts its loops through one Loops, so none outlives the
// service and every loop's error reaches the service's own.
//
// A loop that fails early does not stop the others: the service keeps serving what
// does not depend on it, as it would without that loop, and reports the error when it
// stops.
type Loops struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

// NewLoops makes the loops of a service whose life is ctx.
func NewLoops(ctx context.Context) *Loops {
	ctx, cancel := context.WithCancel(ctx)
	return &Loops{ctx: ctx, cancel: cancel}
}

// Go runs run in its own goroutine until the loops' context ends; name says which
// loop an error came from.
func (l *Loops) Go(name string, run func(context.Context) error) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		if err := run(l.ctx); err != nil {
			l.mu.Lock()
			l.errs = append(l.errs, fmt.Errorf("%s: %w", name, err))
			l.mu.Unlock()
		}
	}()
}

// Stop ends every loop, waits for them, and returns their errors.
func (l *Loops) Stop() error {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return errors.Join(l.errs...)
}
