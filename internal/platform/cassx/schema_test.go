package cassx

import (
	"net"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

func TestCompareSchemas(t *testing.T) {
	v1 := gocql.UUID{1}
	v2 := gocql.UUID{2}
	self := net.ParseIP("127.0.0.2")
	a, b := net.ParseIP("127.0.0.3"), net.ParseIP("127.0.0.4")
	for _, tc := range []struct {
		name  string
		peers []peerSchema
		want  string // "" for agreement
	}{
		{"alone", nil, ""},
		{"all on one version", []peerSchema{{a, v1, 16}, {b, v1, 16}}, ""},
		{"a peer behind", []peerSchema{{a, v1, 16}, {b, v2, 16}},
			"127.0.0.2 has schema " + v1.String() + "; 127.0.0.4 has schema " + v2.String()},
		// The case the driver's own check skips: a node whose row has no tokens yet.
		{"a peer joining without tokens", []peerSchema{{a, v1, 0}},
			"127.0.0.2 has schema " + v1.String() + "; 127.0.0.3 is joining the ring"},
		{"a peer without a version", []peerSchema{{a, gocql.UUID{}, 16}},
			"127.0.0.2 has schema " + v1.String() + "; 127.0.0.3 is joining the ring"},
		{"both, listed in order", []peerSchema{{b, v2, 16}, {a, v1, 0}},
			"127.0.0.2 has schema " + v1.String() + "; 127.0.0.3 is joining the ring, 127.0.0.4 has schema " + v2.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := compareSchemas(self, v1, tc.peers)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Fatalf("compareSchemas = %q, want %q", got, tc.want)
			}
		})
	}
}
