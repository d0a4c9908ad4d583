package cursor

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

const (
	secretA = "first secret of thirty-two bytes or more"
	secretB = "second secret, also thirty-two bytes long"
)

func TestSignedCursorsOpenWithTheirKeys(t *testing.T) {
	a, err := NewKeys(secretA)
	if err != nil {
		t.Fatal(err)
	}
	c := Format{Version: 1}.Encode([]byte("position"))
	signed := a.Sign(c)
	if len(signed) != len(c)+TagLen || !strings.HasPrefix(signed, c) {
		t.Fatalf("Sign(%q) = %q: want the cursor and a %d-character tag", c, signed, TagLen)
	}
	if _, err := base64.RawURLEncoding.DecodeString(signed[len(c):]); err != nil {
		t.Errorf("the tag is not base64url: %v", err)
	}
	if got, err := a.Open(signed); err != nil || got != c {
		t.Fatalf("Open = %q, %v; want %q", got, err, c)
	}

	// During a rotation B signs and A is still accepted; afterwards A's cursors are not.
	rotating, err := NewKeys(secretB, secretA)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rotating.Open(signed); err != nil || got != c {
		t.Errorf("a cursor of the previous secret during the rotation: %q, %v", got, err)
	}
	if got, err := a.Open(rotating.Sign(c)); err == nil {
		t.Errorf("a cursor of a secret A does not hold opened as %q", got)
	}
	after, _ := NewKeys(secretB)
	if _, err := after.Open(signed); !errors.Is(err, ErrUnsigned) {
		t.Errorf("a cursor of a retired secret: %v, want ErrUnsigned", err)
	}
}

func TestOpenRefusesWhatNoKeySigned(t *testing.T) {
	k, _ := NewKeys(secretA)
	c := Format{Version: 1}.Encode([]byte("position"))
	signed := k.Sign(c)
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	for name, s := range map[string]string{
		"unsigned":          c,
		"tag of another":    Format{Version: 1}.Encode([]byte("elsewhere")) + signed[len(c):],
		"cursor edited":     flip(signed, 2),
		"tag edited":        flip(signed, len(signed)-3),
		"tag not base64url": signed[:len(signed)-1] + "*",
		"empty":             "",
		"only a tag":        signed[len(c):],
	} {
		got, err := k.Open(s)
		if err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Open(%q) = %q, %v; want an ErrInvalid", name, s, got, err)
		}
		if err != nil && strings.Contains(err.Error(), secretA) {
			t.Errorf("%s: the error shows the secret", name)
		}
	}
}

func TestKeysRefuseShortSecretsAndNone(t *testing.T) {
	if _, err := NewKeys("short"); err == nil || strings.Contains(err.Error(), "short") {
		t.Errorf("a short secret: %v; want an error that does not show it", err)
	}
	if _, err := NewKeys("", ""); err == nil {
		t.Error("no secret accepted")
	}
	if k, err := NewKeys(secretA, ""); err != nil || len(k.keys) != 1 {
		t.Errorf("an empty rotation slot: %v", err)
	}
	var none *Keys
	if got, err := none.Open("anything"); got != "anything" || err != nil || none.Sign("x") != "x" {
		t.Error("nil Keys must pass cursors through")
	}
	r1, r2 := RandomKeys(), RandomKeys()
	if _, err := r2.Open(r1.Sign("cursor")); err == nil {
		t.Error("two random keys agree")
	}
}
