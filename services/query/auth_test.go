package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/internal/api/openapi"
)

// The routes a user token may call are those whose security the OpenAPI document
// gives userToken, no more and no fewer.
func TestUserRoutesMatchTheDocument(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapi.Document(), &doc); err != nil {
		t.Fatal(err)
	}
	var want []string
	for path, item := range doc.Paths {
		for method, raw := range item {
			var op struct {
				Services []string           `json:"x-service"`
				Security []map[string][]any `json:"security"`
			}
			if !slices.Contains([]string{"get", "put", "post", "delete", "patch"}, method) {
				continue
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			if !slices.Contains(op.Services, "query") {
				continue
			}
			for _, s := range op.Security {
				if _, ok := s["userToken"]; ok {
					want = append(want, strings.NewReplacer("{", ":", "}", "").Replace(path))
				}
			}
		}
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(userRoutes))
	if !slices.Equal(got, want) {
		t.Fatalf("userRoutes = %v; the document lets user tokens call %v", got, want)
	}
}
