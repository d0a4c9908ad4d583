package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"
)

func TestSignMatchesAnHMACComputedByHand(t *testing.T) {
	secret, body := []byte("0123456789abcdef"), []byte(`{"endpoint":"crm","id":"1-2-3","changes":[]}`)
	at := time.Unix(1764214867, 0)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("1764214867." + string(body)))
	want := "t=1764214867,v1=" + hex.EncodeToString(m.Sum(nil))
	if got := Sign(secret, at, body); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

func TestVerify(t *testing.T) {
	secret, other := []byte("0123456789abcdef"), []byte("fedcba9876543210")
	body := []byte(`{"changes":[]}`)
	at := time.Unix(1764214867, 0)
	h := Sign(secret, at, body)
	for _, c := range []struct {
		name    string
		header  string
		body    []byte
		now     time.Time
		secrets [][]byte
		want    error
	}{
		{"valid", h, body, at.Add(time.Minute), [][]byte{secret}, nil},
		{"either secret of a rotation", h, body, at, [][]byte{other, secret}, nil},
		{"another secret", h, body, at, [][]byte{other}, ErrSignature},
		{"body changed", h, []byte(`{"changes":[1]}`), at, [][]byte{secret}, ErrSignature},
		{"too old", h, body, at.Add(6 * time.Minute), [][]byte{secret}, ErrTooOld},
		{"from the future", h, body, at.Add(-6 * time.Minute), [][]byte{secret}, ErrTooOld},
		{"no time", "v1=00", body, at, [][]byte{secret}, ErrMalformed},
		{"no signature", "t=1764214867", body, at, [][]byte{secret}, ErrMalformed},
		{"not hex", "t=1764214867,v1=zz", body, at, [][]byte{secret}, ErrMalformed},
	} {
		err := Verify(c.header, c.body, 5*time.Minute, c.now, c.secrets...)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: Verify = %v, want %v", c.name, err, c.want)
		}
	}
}
