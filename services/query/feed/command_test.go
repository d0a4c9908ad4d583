package feed

import (
	"slices"
	"strings"
	"testing"
)

func TestDecodeCommand(t *testing.T) {
	long := strings.Repeat("x", 129)
	for _, tt := range []struct {
		in      string
		want    Command
		wantErr string
	}{
		{`{"op":"subscribe","userIds":["a","b"]}`, Command{Op: OpSubscribe, UserIDs: []string{"a", "b"}}, ""},
		{` {"userIds":["a"],"op":"unsubscribe"} `, Command{Op: OpUnsubscribe, UserIDs: []string{"a"}}, ""},
		{`{"op":"subscribe","userIds":["a"]}{}`, Command{}, "data after the object"},
		{`{"op":"subscribe"}`, Command{}, "userIds: at least one"},
		{`{"op":"subscribe","userIds":[]}`, Command{}, "userIds: at least one"},
		{`{"op":"subscribe","userIds":["a","b","c","d"]}`, Command{}, "userIds: at most 3"},
		{`{"op":"subscribe","userIds":["a",""]}`, Command{}, "userIds[1]: must not be empty"},
		{`{"op":"subscribe","userIds":["` + long + `"]}`, Command{}, "userIds[0]: must be at most 128 bytes"},
		{`{"op":"subscribe","userIds":["a\u0001"]}`, Command{}, "userIds[0]: must not contain control"},
		{`{"op":"watch","userIds":["a"]}`, Command{}, `op: must be subscribe or unsubscribe, got "watch"`},
		{`{"userIds":["a"]}`, Command{}, "op: is required"},
		{`{"op":"subscribe","userIds":["a"],"all":true}`, Command{}, "unknown field"},
		{`{"op":"subscribe","userIds":"a"}`, Command{}, "not a command object"},
		{`["subscribe"]`, Command{}, "not a command object"},
		{``, Command{}, "not a command object"},
	} {
		got, err := DecodeCommand([]byte(tt.in), 3)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("DecodeCommand(%s) = %+v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.Op != tt.want.Op || !slices.Equal(got.UserIDs, tt.want.UserIDs) {
			t.Errorf("DecodeCommand(%s) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func FuzzDecodeCommand(f *testing.F) {
	f.Add([]byte(`{"op":"subscribe","userIds":["a","b"]}`))
	f.Add([]byte(`{"op":"unsubscribe","userIds":["42"]}`))
	f.Add([]byte(`{"op":"subscribe","userIds":["a\u0000"]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b, 10)
		if err != nil {
			return
		}
		if c.Op != OpSubscribe && c.Op != OpUnsubscribe {
			t.Fatalf("accepted op %q", c.Op)
		}
		if len(c.UserIDs) == 0 || len(c.UserIDs) > 10 {
			t.Fatalf("accepted %d user ids", len(c.UserIDs))
		}
		for _, id := range c.UserIDs {
			if id == "" || len(id) > 128 || strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Fatalf("accepted user id %q", id)
			}
		}
	})
}
