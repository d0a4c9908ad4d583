package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestProbeWithinEndsAtItsDeadline(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	start := time.Now()
	// A probe that ignores its context, as a driver stuck in a connect does.
	err := probeWithin(context.Background(), 100*time.Millisecond, func(context.Context) error { <-block; return nil })
	if err == nil || !strings.Contains(err.Error(), "no answer within 100ms") {
		t.Fatalf("probeWithin = %v, want no answer within 100ms", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("probeWithin returned after %v", took)
	}

	refused := errors.New("connection refused")
	if err := probeWithin(context.Background(), time.Minute, func(context.Context) error { return refused }); err != refused {
		t.Fatalf("probeWithin = %v, want the probe's own error", err)
	}
	if err := probeWithin(context.Background(), time.Minute, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("probeWithin = %v, want nil", err)
	}
}
