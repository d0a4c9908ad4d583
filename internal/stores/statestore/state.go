package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// A user's state in Redis is the content of pulse.v1.UserState in a denser form than
// protobuf's, because every byte of it is paid once per registered user and because a
// value longer than hash-max-listpack-value (64 bytes by default) turns its whole
// bucket into a regular hash, several times larger. Protobuf spends 9 bytes on each of
// the four timestamps of a one-device user; they are nearly always equal or close, so
// here only the user's last-seen is absolute and the others are differences from it.
// A typical one-device user takes 36 bytes, against 60 as protobuf (state_test.go).
//
// Format 1, all varints as in encoding/binary:
//
//	byte     format << 4 | invisible << 3 | status
//	uvarint  index
//	uvarint  offset + 1                 (offset is -1 before the first event)
//	varint   last seen, unix µs         (0: never)
//	varint   last seen - last active    (µs; a zero time is 0 µs, so a difference too)
//	varint   last seen - last updated
//	uvarint  devices, then for each:
//	  uvarint  length of the id, the id
//	  byte     status
//	  varint   user's last seen - the device's last seen
//
// Format 2 is format 1 for a user whose public times (presence.Public) differ from
// their own, which only a period of invisibility does; every device also has
//
//	byte     1 if hidden, else 0
//	varint   user's last seen - the device's public last seen
//
// and after the devices come
//
//	varint   last seen - public last updated
//	varint   last seen - public last active
//	varint   last seen - public last seen
//
// A user who was never invisible pays nothing for it. Format 1 reads with public times
// equal to the user's own.
//
// Formats 5 and 6 are formats 1 and 2 (format | 4) for a user whose custom status was
// ever set or cleared (presence.User.Custom, CustomSetAt); after everything else come
//
//	varint   last seen - custom set at  (µs)
//	uvarint  length of the text, the text
//	uvarint  length of the emoji, the emoji
//	varint   until, unix µs             (0: none)
//
// so a user who never set one pays nothing for it either, and every state written
// before custom statuses existed reads with none.
//
// The format lives in the first byte's high bits so that a later one can be read beside
// it while a deployment rewrites its states.
const (
	stateFormat       = 1
	stateFormatPublic = 2
	// stateCustom is the format bit of a state that ends with a custom status.
	stateCustom = 4
)

// maxStatus is the largest status value the format holds (3 bits) and that exists.
const maxStatus = presence.Invisible

var errTruncated = errors.New("truncated")

// encodeState appends u's encoding to dst.
func encodeState(dst []byte, u *presence.User) ([]byte, error) {
	if u.Status > maxStatus {
		return nil, fmt.Errorf("status %d cannot be stored", u.Status)
	}
	format := byte(stateFormat)
	if !publicIsOwn(u) {
		format = stateFormatPublic
	}
	custom := !u.CustomSetAt.IsZero() || !u.Custom.IsZero()
	h := format<<4 | byte(u.Status)
	if custom {
		h |= stateCustom << 4
	}
	if u.Invisible {
		h |= 1 << 3
	}
	seen := presence.Micros(u.LastSeen)
	dst = append(dst, h)
	dst = binary.AppendUvarint(dst, uint64(u.Index))
	dst = binary.AppendUvarint(dst, uint64(u.Offset+1))
	dst = binary.AppendVarint(dst, seen)
	dst = binary.AppendVarint(dst, seen-presence.Micros(u.LastActive))
	dst = binary.AppendVarint(dst, seen-presence.Micros(u.LastUpdated))
	dst = binary.AppendUvarint(dst, uint64(len(u.Devices)))
	for _, d := range u.Devices {
		if d.Status > maxStatus {
			return nil, fmt.Errorf("device %q: status %d cannot be stored", d.ID, d.Status)
		}
		dst = binary.AppendUvarint(dst, uint64(len(d.ID)))
		dst = append(dst, d.ID...)
		dst = append(dst, byte(d.Status))
		dst = binary.AppendVarint(dst, seen-presence.Micros(d.LastSeen))
		if format == stateFormatPublic {
			hidden := byte(0)
			if d.Hidden {
				hidden = 1
			}
			dst = append(dst, hidden)
			dst = binary.AppendVarint(dst, seen-presence.Micros(d.PublicLastSeen))
		}
	}
	if format == stateFormatPublic {
		dst = binary.AppendVarint(dst, seen-presence.Micros(u.Public.LastUpdated))
		dst = binary.AppendVarint(dst, seen-presence.Micros(u.Public.LastActive))
		dst = binary.AppendVarint(dst, seen-presence.Micros(u.Public.LastSeen))
	}
	if custom {
		c := u.Custom
		dst = binary.AppendVarint(dst, seen-presence.Micros(u.CustomSetAt))
		dst = binary.AppendUvarint(dst, uint64(len(c.Text)))
		dst = append(dst, c.Text...)
		dst = binary.AppendUvarint(dst, uint64(len(c.Emoji)))
		dst = append(dst, c.Emoji...)
		dst = binary.AppendVarint(dst, presence.Micros(c.Until))
	}
	return dst, nil
}

// publicIsOwn tells whether u's public times are its own, as for every user who was
// never invisible.
func publicIsOwn(u *presence.User) bool {
	p := u.Public
	if !p.LastUpdated.Equal(u.LastUpdated) || !p.LastActive.Equal(u.LastActive) || !p.LastSeen.Equal(u.LastSeen) {
		return false
	}
	for _, d := range u.Devices {
		if d.Hidden || !d.PublicLastSeen.Equal(d.LastSeen) {
			return false
		}
	}
	return true
}

// stateReader reads a state's fields in order, remembering the first error.
type stateReader struct {
	b   []byte
	err error
}

func (r *stateReader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail(errTruncated)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *stateReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(errTruncated)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(errTruncated)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// string reads a length and that many bytes.
func (r *stateReader) string() string {
	l := r.uvarint()
	if r.err == nil && l > uint64(len(r.b)) {
		r.fail(errTruncated)
	}
	if r.err != nil {
		return ""
	}
	s := string(r.b[:l])
	r.b = r.b[l:]
	return s
}

func (r *stateReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// header reads the first byte and the index, all that Locate needs. format comes
// without its custom bit, custom tells it.
func (r *stateReader) header() (format byte, custom bool, status presence.Status, invisible bool, index uint32) {
	h := r.byte()
	format, custom = h>>4&^stateCustom, h>>4&stateCustom != 0
	if r.err == nil && format != stateFormat && format != stateFormatPublic {
		r.fail(fmt.Errorf("unknown state format %d", format))
	}
	status, invisible = presence.Status(h&7), h&(1<<3) != 0
	if status > maxStatus {
		r.fail(fmt.Errorf("unknown status %d", status))
	}
	x := r.uvarint()
	if x > 1<<32-1 {
		r.fail(fmt.Errorf("index %d out of range", x))
	}
	return format, custom, status, invisible, uint32(x)
}

// decodeState is the inverse of encodeState.
func decodeState(b string) (*presence.User, error) {
	r := stateReader{b: []byte(b)}
	format, custom, st, inv, idx := r.header()
	u := &presence.User{Index: idx, Status: st, Invisible: inv}
	u.Offset = int64(r.uvarint()) - 1
	seen := r.varint()
	u.LastSeen = presence.FromMicros(seen)
	u.LastActive = presence.FromMicros(seen - r.varint())
	u.LastUpdated = presence.FromMicros(seen - r.varint())
	n := r.uvarint()
	// Each device takes at least three bytes: a bound on what a corrupt count allocates.
	if r.err == nil && n > uint64(len(r.b))/3 {
		r.fail(fmt.Errorf("%d devices in %d bytes", n, len(r.b)))
	}
	if r.err == nil {
		u.Devices = make([]presence.Device, n)
	}
	for i := range u.Devices {
		l := r.uvarint()
		if r.err == nil && l > uint64(len(r.b)) {
			r.fail(errTruncated)
		}
		if r.err != nil {
			break
		}
		d := &u.Devices[i]
		d.ID, r.b = string(r.b[:l]), r.b[l:]
		if d.Status = presence.Status(r.byte()); d.Status > maxStatus {
			r.fail(fmt.Errorf("device %q: unknown status %d", d.ID, d.Status))
		}
		d.LastSeen = presence.FromMicros(seen - r.varint())
		if format == stateFormatPublic {
			switch r.byte() {
			case 0:
			case 1:
				d.Hidden = true
			default:
				r.fail(fmt.Errorf("device %q: bad hidden flag", d.ID))
			}
			d.PublicLastSeen = presence.FromMicros(seen - r.varint())
		}
	}
	if format == stateFormat {
		u.ResetPublic()
	} else {
		u.Public.LastUpdated = presence.FromMicros(seen - r.varint())
		u.Public.LastActive = presence.FromMicros(seen - r.varint())
		u.Public.LastSeen = presence.FromMicros(seen - r.varint())
	}
	if custom {
		u.CustomSetAt = presence.FromMicros(seen - r.varint())
		u.Custom.Text = r.string()
		u.Custom.Emoji = r.string()
		u.Custom.Until = presence.FromMicros(r.varint())
	}
	if r.err == nil && len(r.b) > 0 {
		r.fail(fmt.Errorf("%d bytes after the state", len(r.b)))
	}
	if r.err != nil {
		return nil, fmt.Errorf("decoding state: %w", r.err)
	}
	// As presence.UserFromPB: a state never given a status is offline.
	if u.Status == presence.StatusUnknown {
		u.Status = presence.Offline
	}
	return u, nil
}

// stateIndex reads only the bitmap index of an encoded state.
func stateIndex(b string) (uint32, error) {
	// The first byte and at most ten of a uvarint: no need to copy the rest.
	r := stateReader{b: []byte(b[:min(len(b), 1+binary.MaxVarintLen64)])}
	_, _, _, _, idx := r.header()
	if r.err != nil {
		return 0, fmt.Errorf("decoding state: %w", r.err)
	}
	return idx, nil
}
