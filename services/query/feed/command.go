package feed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// Command is what a WebSocket client may send:
//
//	{"op":"subscribe","userIds":["a","b"]}
//	{"op":"unsubscribe","userIds":["a"]}
type Command struct {
	Op      string   `json:"op"`
	UserIDs []string `json:"userIds"`
}

// Command operations.
const (
	OpSubscribe   = "subscribe"
	OpUnsubscribe = "unsubscribe"
)

// DecodeCommand reads one command: a JSON object with exactly the fields above,
// a known op, and 1..maxUsers valid user ids. The error says what is wrong, for the
// client.
func DecodeCommand(b []byte, maxUsers int) (Command, error) {
	var c Command
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Command{}, fmt.Errorf("not a command object: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Command{}, errors.New("not a command object: data after the object")
	}
	switch c.Op {
	case OpSubscribe, OpUnsubscribe:
	case "":
		return Command{}, errors.New("op: is required")
	default:
		return Command{}, fmt.Errorf("op: must be %s or %s, got %q", OpSubscribe, OpUnsubscribe, c.Op)
	}
	if len(c.UserIDs) == 0 {
		return Command{}, errors.New("userIds: at least one user id is required")
	}
	if len(c.UserIDs) > maxUsers {
		return Command{}, fmt.Errorf("userIds: at most %d user ids, got %d", maxUsers, len(c.UserIDs))
	}
	for i, id := range c.UserIDs {
		if err := presence.ValidateID(id, presence.MaxUserIDLen); err != nil {
			return Command{}, fmt.Errorf("userIds[%d]: %w", i, err)
		}
	}
	return c, nil
}

// Handle applies a decoded command to s.
func (s *Session) Handle(c Command) error {
	if c.Op == OpUnsubscribe {
		return s.Unsubscribe(c.UserIDs)
	}
	return s.Subscribe(c.UserIDs)
}
