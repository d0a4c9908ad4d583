package auth

import (
	"slices"
	"testing"
)

func TestWatchableListsWhatAPrincipalMayWatch(t *testing.T) {
	if ids, all := (Principal{Name: "k"}).Watchable(); !all || ids != nil {
		t.Fatalf("a key: %v %v, want all", ids, all)
	}
	set := map[string]bool{"b": true, "a": true, "c": true}
	ids, all := Principal{UserID: "a", watch: &set}.Watchable()
	slices.Sort(ids)
	if all || !slices.Equal(ids, []string{"a", "b", "c"}) {
		t.Fatalf("a token: %v %v, want [a b c]", ids, all)
	}
	if ids, _ := (Principal{UserID: "a"}).Watchable(); !slices.Equal(ids, []string{"a"}) {
		t.Fatalf("a token without claim: %v", ids)
	}
}
