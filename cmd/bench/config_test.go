package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestQuickDefaultsYieldToExplicitFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-quick", "-scale-users", "2000000", "-root", t.TempDir()}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.scaleUsers != 2_000_000 {
		t.Errorf("-scale-users given with -quick: got %d", cfg.scaleUsers)
	}
	if cfg.stepTime != 8*time.Second || cfg.halfTime != 10*time.Second {
		t.Errorf("-quick left step %v, half %v", cfg.stepTime, cfg.halfTime)
	}
	if !slices.Equal(cfg.batchRates, []float64{5000, 10000, 20000, 35000, 50000}) {
		t.Errorf("-quick batch rates %v", cfg.batchRates)
	}
	if cfg.flags["quick"] != "true" || cfg.flags["scale-users"] != "2000000" {
		t.Errorf("recorded flags %v", cfg.flags)
	}
	if !slices.Equal(cfg.scaleOutTopologies, []string{"single"}) || cfg.scaleOutEvents != 300_000 {
		t.Errorf("-quick scale-out: topologies %v, %d events", cfg.scaleOutTopologies, cfg.scaleOutEvents)
	}
	for _, p := range allPhases {
		if !cfg.phases[p] {
			t.Errorf("phase %s off by default", p)
		}
	}
}

func TestFullDefaults(t *testing.T) {
	cfg, err := parseFlags([]string{"-root", t.TempDir()}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.scaleUsers != 10_000_000 || cfg.stepTime != 20*time.Second || cfg.batchRates[len(cfg.batchRates)-1] != 125000 {
		t.Errorf("defaults: %d users, step %v, rates %v", cfg.scaleUsers, cfg.stepTime, cfg.batchRates)
	}
	if !slices.Equal(cfg.scaleOutTopologies, []string{"single", "cluster"}) || cfg.scaleOutRounds != 2 {
		t.Errorf("scale-out defaults: topologies %v, %d rounds", cfg.scaleOutTopologies, cfg.scaleOutRounds)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-batch-rates", "10000,5000"},
		{"-batch-rates", "0"},
		{"-phases", "batch,warp"},
		{"-batch-size", "0"},
		{"-scale-online", "1.5"},
		{"-min-accepted", "0"},
		{"-scaleout-topologies", "single,mesh"},
		{"-scaleout-rounds", "0"},
		{"extra"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) succeeded", strings.Join(args, " "))
		}
	}
}
