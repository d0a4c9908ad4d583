package report

import (
	"math"
	"strings"
	"testing"
)

func TestLimitRatiosAndTargets(t *testing.T) {
	r := &Results{
		Batched: &ModeResult{MaxAcceptedEventsPerSec: 30000},
		Single:  &ModeResult{MaxAcceptedEventsPerSec: 5000},
		History: &HistoryCheck{RowsPerSec: 14000, AtOfferedEventsPerSec: 50000},
		Limits: &LimitsResult{
			Kafka:     &KafkaLimit{RecordsPerSec: 100000},
			Echo:      &EchoLimit{MaxAcceptedEventsPerSec: 8000},
			Cassandra: &CassandraLimit{RowsPerSec: 20000},
			Redis:     &RedisLimit{Loop: RedisRun{UsersPerSec: 400000}, WriteWindow: RedisRun{Users: 1, UsersPerSec: 200000}},
		},
	}
	rs := limitRatios(r)
	for id, want := range map[string]float64{"batched-vs-kafka": 0.3, "single-vs-echo": 0.625, "history-vs-gocql": 0.7, "writewindow-vs-redis": 0.5} {
		x, ok := ratioOf(rs, id)
		if !ok || !x.Measured || math.Abs(x.Ratio-want) > 1e-9 {
			t.Errorf("%s: %+v, want ratio %v", id, x, want)
		}
	}
	if x, _ := ratioOf(rs, "rebuild-vs-redis"); x.Measured || x.LimitValue != 400000 {
		t.Errorf("rebuild did not run: %+v", x)
	}
	met := map[string]bool{}
	for _, tg := range ratioTargets(rs) {
		if !tg.Measured {
			t.Errorf("%s not measured", tg.ID)
		}
		met[tg.ID] = tg.Met
	}
	if met["batched-vs-kafka"] || !met["single-vs-echo"] || !met["history-vs-gocql"] {
		t.Errorf("met: %v (want 30%% of Kafka missed, 62%% of Echo and 70%% of gocql met)", met)
	}

	// Phases that did not run: every ratio and ratio target is "not measured".
	empty := &Results{Batched: &ModeResult{MaxAcceptedEventsPerSec: 30000}}
	for _, x := range limitRatios(empty) {
		if x.Measured {
			t.Errorf("%s measured without its limit: %+v", x.ID, x)
		}
	}
	for _, tg := range ratioTargets(limitRatios(empty)) {
		if tg.Measured || fmtResult(tg) != "not measured" {
			t.Errorf("%s: %+v", tg.ID, tg)
		}
	}
	// A limit of 0 (the engine did nothing) is no ratio either.
	zero := &Results{Batched: &ModeResult{MaxAcceptedEventsPerSec: 30000}, Limits: &LimitsResult{Kafka: &KafkaLimit{}}}
	if x, _ := ratioOf(limitRatios(zero), "batched-vs-kafka"); x.Measured {
		t.Errorf("ratio to a zero limit: %+v", x)
	}
	if got := fmtValue(0.5, "ratio"); got != "50%" {
		t.Errorf("fmtValue(0.5, ratio) = %q", got)
	}
}

func TestLimitRatioNotes(t *testing.T) {
	kept := []StepResult{{KeptUp: true}}
	r := &Results{
		Batched: &ModeResult{MaxAcceptedEventsPerSec: 5000, Steps: kept},
		Single:  &ModeResult{MaxAcceptedEventsPerSec: 1000, Steps: []StepResult{{KeptUp: true}, {KeptUp: false}}},
		Limits: &LimitsResult{Kafka: &KafkaLimit{RecordsPerSec: 10000},
			Echo: &EchoLimit{PeakAcceptedEventsPerSec: 4000, Steps: []EchoStep{{OfferedEventsPerSec: 5000, AcceptedEventsPerSec: 4000}}}},
	}
	rs := limitRatios(r)
	if x, _ := ratioOf(rs, "batched-vs-kafka"); !strings.Contains(x.Note, "floors") || x.Ratio != 0.5 {
		t.Errorf("batched, every step kept up: %+v", x)
	}
	x, _ := ratioOf(rs, "single-vs-echo")
	if !x.Measured || x.LimitValue != 4000 || x.Ratio != 0.25 || !strings.Contains(x.Note, "most it accepted") || strings.Contains(x.Note, "floors") {
		t.Errorf("single against a handler that never kept up: %+v", x)
	}
	for _, tg := range ratioTargets(rs) {
		if tg.ID == "batched-vs-kafka" && !strings.Contains(tg.Note, "floors") {
			t.Errorf("target note %q does not carry the ratio's", tg.Note)
		}
	}
}

// ratioOf finds a ratio by id.
func ratioOf(rs []LimitRatio, id string) (LimitRatio, bool) {
	for _, x := range rs {
		if x.ID == id {
			return x, true
		}
	}
	return LimitRatio{}, false
}
