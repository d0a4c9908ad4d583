// Package webhook is the wire form of Pulse's webhooks (docs/webhooks.md): the JSON
// batch pulse-notifier posts to an endpoint, and the Pulse-Signature header that
// proves the batch came from Pulse. A receiver written in Go can import it to verify
// and decode deliveries; receivers in other languages follow docs/webhooks.md.
//
// The signature is HMAC-SHA256, keyed by the endpoint's secret, over the decimal Unix
// time of signing, a dot, and the body as sent: "t=<unix>,v1=<hex>". Signing the time
// lets a receiver refuse an old delivery replayed by someone who captured it.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Headers of a delivery.
const (
	// SignatureHeader carries "t=<unix seconds>,v1=<hex HMAC-SHA256>".
	SignatureHeader = "Pulse-Signature"
	// BatchHeader carries the batch's id, the same on every attempt of the batch.
	BatchHeader = "Pulse-Batch"
	// AttemptHeader carries the attempt's number, 1 for the first.
	AttemptHeader = "Pulse-Attempt"
)

// Batch is the body of one delivery.
type Batch struct {
	// Endpoint is the id of the endpoint the batch was made for.
	Endpoint string `json:"endpoint"`
	// ID names the batch: the same on every attempt, and on a replay from the
	// dead-letter topic.
	ID string `json:"id"`
	// Changes are in log order: a user's changes in the order they happened.
	Changes []Change `json:"changes"`
}

// Change is one change of a user's presence, as a reader of the endpoint's view sees
// it.
type Change struct {
	// ID is the change's own id, the same on every delivery of the change: receivers
	// de-duplicate by it (delivery is at least once).
	ID string `json:"id"`
	// Type is "change" (status or custom status) or "member" (the user joined or left
	// GroupID).
	Type     string    `json:"type"`
	UserID   string    `json:"userId"`
	Status   string    `json:"status"`
	Previous string    `json:"previous,omitempty"`
	At       time.Time `json:"at"`
	// Cause is "event", "timeout" or "erase" (type change only; "erase": the user was
	// erased, docs/changes.md, and the receiver should erase them too).
	Cause string `json:"cause,omitempty"`
	// Data is the user's custom status after the change (type change; null: none).
	Data *Custom `json:"data,omitempty"`
	// GroupID and Joined describe a membership change (type member).
	GroupID string `json:"groupId,omitempty"`
	Joined  *bool  `json:"joined,omitempty"`
	// Groups are the user's groups after the change.
	Groups []string `json:"groups,omitempty"`
}

// Custom is a custom status.
type Custom struct {
	Text  string     `json:"text,omitempty"`
	Emoji string     `json:"emoji,omitempty"`
	Until *time.Time `json:"until,omitempty"`
}

// Change types.
const (
	TypeChange = "change"
	TypeMember = "member"
)

// Sign is the SignatureHeader value of body signed with secret at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Errors of Verify.
var (
	ErrMalformed = errors.New("webhook: malformed " + SignatureHeader + " header")
	ErrSignature = errors.New("webhook: no signature matches")
	ErrTooOld    = errors.New("webhook: signed too long ago")
)

// Verify checks header (SignatureHeader's value) against body and each of secrets
// (during a rotation, the old and the new), and refuses a signature made more than
// tolerance from now (0: any time). The comparison takes the same time whatever the
// bytes.
func Verify(header string, body []byte, tolerance time.Duration, now time.Time, secrets ...[]byte) error {
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrMalformed
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil {
				return ErrMalformed
			}
			sigs = append(sigs, sig)
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrMalformed
	}
	if d := now.Sub(time.Unix(unix, 0)); tolerance > 0 && (d > tolerance || d < -tolerance) {
		return fmt.Errorf("%w: %v from now, more than %v", ErrTooOld, d.Round(time.Second), tolerance)
	}
	for _, s := range secrets {
		want := mac(s, ts, body)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return nil
			}
		}
	}
	return ErrSignature
}

// Decode reads a delivery's body.
func Decode(body []byte) (Batch, error) {
	var b Batch
	if err := json.Unmarshal(body, &b); err != nil {
		return Batch{}, fmt.Errorf("webhook: decoding batch: %w", err)
	}
	return b, nil
}
