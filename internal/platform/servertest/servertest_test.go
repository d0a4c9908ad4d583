package servertest

import "testing"

func TestRequired(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"CI": "true"}, true},
		{map[string]string{"CI": "1"}, true},
		{map[string]string{"CI": "false"}, false},
		{map[string]string{"CI": "yes-please"}, false},
		{map[string]string{"PULSE_REQUIRE_SERVERS": "1"}, true},
		{map[string]string{"CI": "false", "PULSE_REQUIRE_SERVERS": "true"}, true},
	} {
		lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		if got := Required(lookup); got != tc.want {
			t.Errorf("Required(%v) = %v, want %v", tc.env, got, tc.want)
		}
	}
}
