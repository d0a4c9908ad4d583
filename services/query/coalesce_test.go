package main

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// fakeUser is a state whose one device is named id, so a reader can tell whose it got.
func fakeUser(id string) *presence.User {
	u := presence.NewUser(0)
	u.Devices = []presence.Device{{ID: id}}
	return u
}

func startCoalescer(t *testing.T, c *coalescer) {
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// Reads that arrive while a pipeline is in flight go together in the next one, and
// each reader gets its own user.
func TestCoalescerSharesPipelines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var sizes []int
		release := make(chan struct{})
		c := &coalescer{timeout: time.Second, loops: 1, most: 64, queue: make(chan *readReq, 64),
			many: func(ctx context.Context, ids []string) ([]*presence.User, error) {
				mu.Lock()
				sizes = append(sizes, len(ids))
				first := len(sizes) == 1
				mu.Unlock()
				if first {
					<-release
				}
				out := make([]*presence.User, len(ids))
				for i, id := range ids {
					out[i] = fakeUser(id)
				}
				return out, nil
			}}
		startCoalescer(t, c)
		got := make([]string, 11)
		var wg sync.WaitGroup
		read := func(i int) {
			u, err := c.Get(t.Context(), fmt.Sprint("u", i))
			if err != nil {
				t.Errorf("read %d: %v", i, err)
				return
			}
			got[i] = u.Devices[0].ID
		}
		wg.Go(func() { read(0) })
		synctest.Wait() // the first read's pipeline is in flight
		for i := 1; i <= 10; i++ {
			wg.Go(func() { read(i) })
		}
		synctest.Wait()
		close(release)
		wg.Wait()
		if !reflect.DeepEqual(sizes, []int{1, 10}) {
			t.Errorf("pipelines of %v reads, want [1 10]", sizes)
		}
		for i, id := range got {
			if id != fmt.Sprint("u", i) {
				t.Errorf("read %d got user %q", i, id)
			}
		}
	})
}

// A shard being rebuilt fails a shared pipeline; each of its reads is then tried
// alone, so users of whole shards are answered.
func TestCoalescerFallsBackToSingleReadsDuringARebuild(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		block := make(chan struct{})
		calls := 0
		c := &coalescer{timeout: time.Second, loops: 1, most: 64, queue: make(chan *readReq, 64),
			many: func(ctx context.Context, ids []string) ([]*presence.User, error) {
				if calls++; calls == 1 {
					<-block
					return []*presence.User{fakeUser(ids[0])}, nil
				}
				return nil, fmt.Errorf("shard 3: %w", statestore.ErrRebuilding)
			},
			one: func(ctx context.Context, id string) (*presence.User, error) {
				if id == "b" {
					return nil, fmt.Errorf("shard 3: %w", statestore.ErrRebuilding)
				}
				return fakeUser(id), nil
			}}
		startCoalescer(t, c)
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = c.Get(t.Context(), "first") })
		synctest.Wait()
		var ua *presence.User
		var errA, errB error
		wg.Go(func() { ua, errA = c.Get(t.Context(), "a") })
		wg.Go(func() { _, errB = c.Get(t.Context(), "b") })
		synctest.Wait()
		close(block)
		wg.Wait()
		if errA != nil || ua == nil || ua.Devices[0].ID != "a" {
			t.Errorf("a: %v, %v; want its state", ua, errA)
		}
		if !errors.Is(errB, statestore.ErrRebuilding) {
			t.Errorf("b: %v, want ErrRebuilding", errB)
		}
	})
}

// A reader whose request ends stops waiting; the loop goes on.
func TestCoalescerReaderGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &coalescer{timeout: time.Minute, loops: 1, most: 64, queue: make(chan *readReq, 64),
			many: func(ctx context.Context, ids []string) ([]*presence.User, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			}}
		startCoalescer(t, c)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		if _, err := c.Get(ctx, "u"); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Errorf("Get = %v after %v, want the reader's deadline after 1s", err, time.Since(start))
		}
	})
}
