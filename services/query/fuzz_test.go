package main

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
)

// FuzzWatchIDs: whatever ?userIds= holds is a list of valid ids within the bound, or
// a 400 naming userIds; never a panic.
func FuzzWatchIDs(f *testing.F) {
	for _, s := range []string{"alice,bob", "", ",", "a,,b", strings.Repeat("x,", 200), "\x00", "ünïcode,ok"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		values, err := url.ParseQuery("userIds=" + q)
		if err != nil {
			return
		}
		ids, err := watchIDs(values["userIds"], 100)
		if err != nil {
			var he *httpserver.Error
			if !errors.As(err, &he) || he.Status != http.StatusBadRequest || !strings.HasPrefix(he.Field, "userIds") {
				t.Fatalf("error %v is not a 400 naming userIds", err)
			}
			return
		}
		if len(ids) > 100 {
			t.Fatalf("%d ids accepted, bound 100", len(ids))
		}
		for _, id := range ids {
			if presence.ValidateID(id, presence.MaxUserIDLen) != nil {
				t.Fatalf("invalid id %q accepted", id)
			}
		}
	})
}

// FuzzRequestBodies: the JSON bodies of POST /statuses and POST /v1/online/filter
// decode into their request or give a 400, never a panic.
func FuzzRequestBodies(f *testing.F) {
	for _, s := range []string{`{"userIds":["a","b"]}`, `{}`, `{"userIds":null}`, `[]`, `{"userIds":["a"],"x":1}`, `{"userIds":[1]}`, `{"userIds":["a"]}{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, req := range []any{&statusesRequest{}, &filterRequest{}} {
			if err := httpserver.DecodeObject(body, req, ""); err != nil {
				var he *httpserver.Error
				if !errors.As(err, &he) || he.Status/100 != 4 {
					t.Fatalf("body %q: %v is not a 4xx", body, err)
				}
			}
		}
	})
}
