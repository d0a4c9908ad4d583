package main

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/cassx"
)

func TestParseRetentionFlags(t *testing.T) {
	local := cassx.Config{Hosts: []string{"127.0.0.1"}, Port: 19042, Consistency: "LOCAL_QUORUM", Timeout: 30 * time.Second, ConnectTimeout: 10 * time.Second}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want retentionFlags
	}{
		{
			name: "list",
			want: retentionFlags{cass: local, keyspace: "pulse", timeout: 30 * time.Second},
		},
		{
			name: "list as CSV elsewhere",
			args: []string{"-csv", "-hosts", "10.0.0.1,10.0.0.2", "-port", "9042", "-keyspace", "pulse_prod", "-username", "ops", "-timeout", "1m"},
			env:  map[string]string{"PULSE_CASSANDRA_PASSWORD": "pw"},
			want: retentionFlags{
				cass: cassx.Config{Hosts: []string{"10.0.0.1", "10.0.0.2"}, Port: 9042, Consistency: "LOCAL_QUORUM", Timeout: time.Minute,
					ConnectTimeout: 10 * time.Second, Username: "ops", Password: "pw"},
				keyspace: "pulse_prod", timeout: time.Minute, csv: true,
			},
		},
		{
			name: "set in days",
			args: []string{"set", "user_activity", "90d"},
			want: retentionFlags{cass: local, keyspace: "pulse", timeout: 30 * time.Second, set: true, table: "user_activity", ttl: 90 * 24 * time.Hour},
		},
		{
			name: "set with flags among the arguments",
			args: []string{"set", "-keyspace", "pulse_b", "user_status", "-timeout", "5s", "34560000"},
			want: retentionFlags{cass: func() cassx.Config { c := local; c.Timeout = 5 * time.Second; return c }(),
				keyspace: "pulse_b", timeout: 5 * time.Second, set: true, table: "user_status", ttl: 400 * 24 * time.Hour},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRetentionFlags(tt.args, func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatalf("parseRetentionFlags(%q) error = %v", tt.args, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("parseRetentionFlags(%q) =\n%+v\nwant\n%+v", tt.args, got, tt.want)
			}
		})
	}
}

func TestParseRetentionFlagsErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"user_activity"}, `retention: unexpected arguments ["user_activity"]; usage: pulsectl retention [-csv] | pulsectl retention set TABLE DURATION`},
		{[]string{"set"}, "retention set: want TABLE and DURATION, got 0 arguments; usage: pulsectl retention set TABLE DURATION [flags]"},
		{[]string{"set", "user_activity"}, "retention set: want TABLE and DURATION, got 1 arguments; usage: pulsectl retention set TABLE DURATION [flags]"},
		{[]string{"set", "user_activity", "90d", "extra"}, "retention set: want TABLE and DURATION, got 3 arguments; usage: pulsectl retention set TABLE DURATION [flags]"},
		{[]string{"set", "User_Activity", "90d"}, `retention set: "User_Activity" is not a table name (lower-case letter, then up to 47 lower-case letters, digits or underscores)`},
		{[]string{"set", "user_activity; DROP TABLE user_status", "90d"}, `retention set: "user_activity; DROP TABLE user_status" is not a table name (lower-case letter, then up to 47 lower-case letters, digits or underscores)`},
		{[]string{"set", "pulse.user_activity", "90d"}, `retention set: "pulse.user_activity" is not a table name (lower-case letter, then up to 47 lower-case letters, digits or underscores)`},
		{[]string{"set", "user_activity", "30m"}, `retention set user_activity: duration "30m" is shorter than 1h, the shortest retention pulsectl sets`},
		{[]string{"set", "user_activity", "90"}, `retention set user_activity: duration "90" is shorter than 1h, the shortest retention pulsectl sets`},
		{[]string{"set", "user_activity", "ninety days"}, `retention set user_activity: duration "ninety days": want a duration such as 90d, 400d, 36h, 1d12h or 7776000 (seconds)`},
		{[]string{"set", "user_activity", "-90d"}, "flag provided but not defined: -90d"},
		{[]string{"set", "user_activity", "--", "-90d"}, `retention set user_activity: duration "-90d": want a duration such as 90d, 400d, 36h, 1d12h or 7776000 (seconds)`},
		{[]string{"set", "-keyspace", "Pulse", "user_activity", "90d"}, `retention set -keyspace: "Pulse" is not a valid keyspace name (lower-case letter, then up to 47 lower-case letters, digits or underscores)`},
		{[]string{"-keyspace", "pulse-prod"}, `retention -keyspace: "pulse-prod" is not a valid keyspace name (lower-case letter, then up to 47 lower-case letters, digits or underscores)`},
		{[]string{"-timeout", "0s"}, "retention -timeout: 0s must be positive"},
		{[]string{"-hosts", " , "}, "cassandra Hosts: at least one contact point is required"},
		{[]string{"set", "user_activity", "90d", "-csv"}, "flag provided but not defined: -csv"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := parseRetentionFlags(tt.args, func(string) string { return "" })
			if err == nil || err.Error() != tt.want {
				t.Fatalf("parseRetentionFlags(%q) error = %v, want %q", tt.args, err, tt.want)
			}
		})
	}
	if _, err := parseRetentionFlags([]string{"set", "-h"}, func(string) string { return "" }); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("retention set -h: error = %v, want flag.ErrHelp", err)
	}
}

func TestParseRetention(t *testing.T) {
	const day = 24 * time.Hour
	ok := map[string]time.Duration{
		"1h":         time.Hour,
		"3600":       time.Hour,
		"3600s":      time.Hour,
		"90d":        90 * day,
		"400d":       400 * day,
		"7776000":    90 * day,
		"2160h":      90 * day,
		"1d12h":      36 * time.Hour,
		"1d30m":      day + 30*time.Minute,
		"1.5h":       90 * time.Minute,
		"7300d":      7300 * day,
		"630720000":  630720000 * time.Second,
		"630720000s": 630720000 * time.Second,
	}
	for in, want := range ok {
		if got, err := parseRetention(in); err != nil || got != want {
			t.Errorf("parseRetention(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                     "want a duration such as",
		"d":                    "want a duration such as",
		"90 d":                 "want a duration such as",
		"90days":               "want a duration such as",
		"1d-1h":                "want a duration such as",
		"1d+1h":                "want a duration such as",
		"1w":                   "want a duration such as",
		"0":                    "must be positive",
		"0d":                   "must be positive",
		"-1h":                  "must be positive",
		"1h0.5s":               "is not a whole number of seconds",
		"3600500ms":            "is not a whole number of seconds",
		"59m59s":               "is shorter than 1h",
		"3599":                 "is shorter than 1h",
		"7301d":                "is longer than Cassandra's longest TTL, 20 years (630720000 s)",
		"630720001":            "is longer than Cassandra's longest TTL",
		"99999999999d":         "is longer than Cassandra's longest TTL",
		"99999999999999999999": "is longer than Cassandra's longest TTL",
	}
	for in, want := range bad {
		if got, err := parseRetention(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseRetention(%q) = %v, %v; want an error saying %q", in, got, err, want)
		}
	}
}

// What retention prints, retention set reads back.
func TestFormatRetention(t *testing.T) {
	for secs, want := range map[int]string{
		0: "none", -1: "none", 1: "1s", 3600: "1h", 5400: "1h30m", 86400: "1d", 129600: "1d12h",
		2592000: "30d", 7776000: "90d", 34560000: "400d", 90061: "1d1h1m1s",
	} {
		got := formatRetention(secs)
		if got != want {
			t.Errorf("formatRetention(%d) = %q, want %q", secs, got, want)
		}
		if secs >= 3600 {
			if back, err := parseRetention(got); err != nil || back != time.Duration(secs)*time.Second {
				t.Errorf("parseRetention(formatRetention(%d) = %q) = %v, %v", secs, got, back, err)
			}
		}
	}
}

func TestCheckRetentionTable(t *testing.T) {
	tables := map[string]int{"user_activity": 7776000, "user_status": 0, "shard_snapshots": 2592000, "shard_changes": 2592000,
		"schema_migrations": 0, "schema_migrations_lock": 0}
	for table, want := range map[string]string{
		"user_activity":          "",
		"user_status":            "",
		"user_sessions":          `retention set: keyspace pulse has no table "user_sessions"; its tables: schema_migrations, schema_migrations_lock, shard_changes, shard_snapshots, user_activity, user_status`,
		"schema_migrations":      "retention set: schema_migrations keeps no retention: it is the migrations' own record (pulsectl migrate), holds no user data and must never expire: migrate would apply every migration again",
		"schema_migrations_lock": "retention set: schema_migrations_lock keeps no retention: it holds the migrations' lock (pulsectl migrate), no user data, and its one row carries a TTL of its own",
		"shard_snapshots":        "retention set: shard_snapshots: history writes its rows USING TTL of PULSE_HISTORY_SNAPSHOT_RETENTION, which wins over the table's default: set that variable on history instead, and PULSE_QUERY_AT_RETENTION on query to match",
		"shard_changes":          "retention set: shard_changes: history writes its rows USING TTL of PULSE_HISTORY_SHARD_CHANGES_RETENTION, which wins over the table's default: set that variable on history instead (at least PULSE_HISTORY_SNAPSHOT_RETENTION)",
	} {
		err := checkRetentionTable("pulse", table, tables)
		if got := errString(err); got != want {
			t.Errorf("checkRetentionTable(%s) = %q, want %q", table, got, want)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestPrintRetention(t *testing.T) {
	tables := map[string]int{"user_status": 34560000, "user_activity": 7776000, "shard_snapshots": 2592000, "schema_migrations": 0, "rollup_checkpoints": 5400}
	var b bytes.Buffer
	if err := printRetention(&b, "pulse", tables, false); err != nil {
		t.Fatal(err)
	}
	want := `keyspace pulse
TABLE               RETENTION                NOTE
rollup_checkpoints  1h30m      (5400 s)
schema_migrations   none       (0 s)         the migrations' own bookkeeping, no user data
shard_snapshots     30d        (2592000 s)   history writes its rows USING TTL of PULSE_HISTORY_SNAPSHOT_RETENTION
user_activity       90d        (7776000 s)
user_status         400d       (34560000 s)
`
	if b.String() != want {
		t.Errorf("printRetention =\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	if err := printRetention(&b, "pulse", tables, true); err != nil {
		t.Fatal(err)
	}
	want = "table,default_time_to_live_seconds\nrollup_checkpoints,5400\nschema_migrations,0\nshard_snapshots,2592000\nuser_activity,7776000\nuser_status,34560000\n"
	if b.String() != want {
		t.Errorf("printRetention -csv =\n%s\nwant\n%s", b.String(), want)
	}
}
