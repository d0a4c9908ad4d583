package app

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestLoopsEndTogetherAndReportErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := NewLoops(ctx)
	var ended atomic.Int32
	for range 3 {
		l.Go("waits", func(ctx context.Context) error {
			<-ctx.Done()
			ended.Add(1)
			return nil
		})
	}
	boom := errors.New("boom")
	l.Go("fails", func(context.Context) error { return boom })
	time.Sleep(10 * time.Millisecond)
	if n := ended.Load(); n != 0 {
		t.Fatalf("%d loops ended when another failed; want them to keep running", n)
	}
	err := l.Stop()
	if n := ended.Load(); n != 3 {
		t.Errorf("Stop returned with %d of 3 loops ended", n)
	}
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "fails: boom") {
		t.Errorf("Stop = %v, want the failed loop's error, named", err)
	}
}

func TestLoopsEndWithTheirService(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	l := NewLoops(ctx)
	done := make(chan struct{})
	l.Go("waits", func(ctx context.Context) error {
		<-ctx.Done()
		close(done)
		return nil
	})
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a loop outlived its service's context")
	}
	if err := l.Stop(); err != nil {
		t.Errorf("Stop = %v", err)
	}
}
