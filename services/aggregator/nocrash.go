//go:build !faulttest

package main

import (
	"log/slog"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

// A production binary has no crash point (crash.go, -tags faulttest).

func crashVars(*int) []*config.Var { return nil }

func crashAfter(int, *slog.Logger) func() { return nil }
