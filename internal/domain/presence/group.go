package presence

import "fmt"

// Group limits (docs/design.md, "Groups"). A group is a set of users — a channel, a
// team, a game server — whose presence is read together.
const (
	// MaxGroupIDLen bounds a group id, which names Redis keys and URL path segments.
	MaxGroupIDLen = 128
	// MaxGroupsPerUser is how many groups one user can be a member of: the aggregator
	// keeps each member's groups to update the groups' counts on every change of the
	// user's status, so the cost of a change grows with it. A join past it is refused.
	MaxGroupsPerUser = 256
	// MaxGroupMembers is the size cap of one group.
	MaxGroupMembers = 10_000_000
)

// ValidateGroupID checks a group id: 1 to MaxGroupIDLen bytes of ASCII letters,
// digits and - _ . : @, so that it is a path segment and a Redis key part as it is.
func ValidateGroupID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("must not be empty")
	case len(id) > MaxGroupIDLen:
		return fmt.Errorf("must be at most %d bytes, got %d", MaxGroupIDLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.', c == ':', c == '@':
		default:
			return fmt.Errorf("must be ASCII letters, digits and - _ . : @ only, got %q at byte %d", c, i)
		}
	}
	return nil
}
