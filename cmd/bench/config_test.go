package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
)

func TestQuickDefaultsYieldToExplicitFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-quick", "-scale-users", "2000000", "-root", t.TempDir()}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ScaleUsers != 2_000_000 {
		t.Errorf("-scale-users given with -quick: got %d", cfg.ScaleUsers)
	}
	if cfg.StepTime != 8*time.Second || cfg.HalfTime != 10*time.Second {
		t.Errorf("-quick left step %v, half %v", cfg.StepTime, cfg.HalfTime)
	}
	if !slices.Equal(cfg.BatchRates, []float64{5000, 10000, 20000, 35000, 50000}) {
		t.Errorf("-quick batch rates %v", cfg.BatchRates)
	}
	if cfg.Flags["quick"] != "true" || cfg.Flags["scale-users"] != "2000000" {
		t.Errorf("recorded flags %v", cfg.Flags)
	}
	if !slices.Equal(cfg.ScaleOutTopologies, []string{"single"}) || cfg.ScaleOutEvents != 300_000 {
		t.Errorf("-quick scale-out: topologies %v, %d events", cfg.ScaleOutTopologies, cfg.ScaleOutEvents)
	}
	if g := cfg.Groups; g.Users != 1_000_000 || g.Members != 100_000 || g.Online != 30_000 || g.Rooms != 1000 || g.RoomSize != 100 || g.Calls != 500 {
		t.Errorf("-quick groups: %+v", g)
	}
	if cfg.Webhooks.Time != 10*time.Second {
		t.Errorf("-quick webhooks load %v", cfg.Webhooks.Time)
	}
	for _, p := range allPhases {
		if !cfg.Phases[p] {
			t.Errorf("phase %s off by default", p)
		}
	}
}

func TestFullDefaults(t *testing.T) {
	cfg, err := parseFlags([]string{"-root", t.TempDir()}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ScaleUsers != 10_000_000 || cfg.StepTime != 20*time.Second || cfg.BatchRates[len(cfg.BatchRates)-1] != 125000 {
		t.Errorf("defaults: %d users, step %v, rates %v", cfg.ScaleUsers, cfg.StepTime, cfg.BatchRates)
	}
	if !slices.Equal(cfg.ScaleOutTopologies, []string{"single", "cluster"}) || cfg.ScaleOutRounds != 2 {
		t.Errorf("scale-out defaults: topologies %v, %d rounds", cfg.ScaleOutTopologies, cfg.ScaleOutRounds)
	}
	if g := cfg.Groups; g.Users != 10_000_000 || g.Members != 1_000_000 || g.Online != 300_000 || g.Batch != 100_000 ||
		g.Rooms != 10_000 || g.RoomSize != 100 || g.Centrifugo != "" || g.CentrifugoEntries != 0 {
		t.Errorf("groups defaults: %+v", g)
	}
	if w := cfg.Webhooks; w.Rate != 5000 || w.Time != 30*time.Second || w.Wait != 2*time.Minute || w.View != "public" || w.NotifierGroup != "pulse-notifier" {
		t.Errorf("webhooks defaults: %+v", w)
	}
	if !cfg.Services {
		t.Error("every phase on, yet no services")
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
		{"-groups-online", "1000001"},
		{"-groups-batch", "100001"},
		{"-groups-members", "20", "-groups-users", "10"},
		{"-groups-room-size", "0"},
		{"-webhooks-view", "admin"},
		{"-webhooks-rate", "0"},
		{"-webhooks-time", "0s"},
		{"extra"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) succeeded", strings.Join(args, " "))
		}
	}
}

// TestNeedServices checks that the stack's services are used when some phase asked
// for runs on them, and only then.
func TestNeedServices(t *testing.T) {
	phases := []harness.Phase{{Name: "own", OwnProcesses: true}, {Name: "shared"}}
	for _, tt := range []struct {
		on   map[string]bool
		want bool
	}{
		{map[string]bool{"own": true}, false},
		{map[string]bool{"own": true, "shared": true}, true},
		{map[string]bool{"shared": true}, true},
		{map[string]bool{}, false},
	} {
		if got := needServices(phases, tt.on); got != tt.want {
			t.Errorf("phases %v: services %v, want %v", tt.on, got, tt.want)
		}
	}
}

// TestServicesByPhase checks that only phases run on the stack's services need them.
func TestServicesByPhase(t *testing.T) {
	for _, tt := range []struct {
		phases string
		want   bool
	}{
		{"groups", false},
		{"groups,scale", true},
		{"present", true},
		{"webhooks", true},
	} {
		cfg, err := parseFlags([]string{"-phases", tt.phases, "-root", t.TempDir()}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Services != tt.want {
			t.Errorf("-phases %s: services %v, want %v", tt.phases, cfg.Services, tt.want)
		}
	}
}
