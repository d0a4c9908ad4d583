package auth

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// Keys are the API keys a service accepts, by the SHA-256 digest of their value.
//
// The keys file has one key a line, fields separated by blanks:
//
//	# name       scopes          digest
//	backend-2026 write           sha256:5e88…
//	dashboard    read,operator   sha256:a1b2…
//
// Blank lines and lines starting with # are ignored. Rotating a key is adding the new
// key's line, moving clients to it, then removing the old line: both work in between.
//
// A presented key is hashed and its digest looked up. The lookup's timing depends
// only on the digest, which tells an attacker nothing about any key's value, so the
// comparison of secrets is constant-time in effect (as crypto/subtle's would be)
// while staying a single map probe however many keys there are.
type Keys struct {
	byDigest map[[32]byte]Principal
	names    map[string]bool
}

// DigestPrefix starts the digest field of a keys file line.
const DigestPrefix = "sha256:"

var keyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$`)

// Digest is the SHA-256 of a key's value.
func Digest(key string) [32]byte { return sha256.Sum256([]byte(key)) }

// Line is the keys file line declaring a key with name, scopes and value.
func Line(name string, scopes Scope, key string) string {
	d := Digest(key)
	return name + " " + scopes.String() + " " + DigestPrefix + hex.EncodeToString(d[:])
}

// keyPrefix starts every key NewKey makes, so a leaked one is recognisable (secret
// scanners) and never mistaken for a JWT: its alphabet has no dot.
const keyPrefix = "pulse_"

// NewKey returns a new random API key: 256 bits from crypto/rand.
func NewKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return keyPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// LoadKeys reads the keys file at path (ParseKeys).
func LoadKeys(path string) (*Keys, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeysFileEnv, err)
	}
	defer f.Close()
	return ParseKeys(f, path)
}

// ParseKeys reads a keys file; source names it in errors, which name the line at
// fault and never repeat its digest.
func ParseKeys(r io.Reader, source string) (*Keys, error) {
	k := &Keys{byDigest: map[[32]byte]Principal{}, names: map[string]bool{}}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := k.parseLine(line); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", source, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", source, err)
	}
	return k, nil
}

func (k *Keys) parseLine(line string) error {
	f := strings.Fields(line)
	if len(f) != 3 {
		return fmt.Errorf("want 3 fields `<name> <scopes> sha256:<hex>`, got %d", len(f))
	}
	name, scopes, digest := f[0], f[1], f[2]
	if !keyNameRE.MatchString(name) {
		return fmt.Errorf("name %q: want 1-64 letters, digits and . _ : @ -, starting with a letter or digit", name)
	}
	s, err := ParseScopes(scopes)
	if err != nil {
		return fmt.Errorf("key %s: %w", name, err)
	}
	hexDigest, ok := strings.CutPrefix(digest, DigestPrefix)
	raw, err := hex.DecodeString(hexDigest)
	if !ok || err != nil || len(raw) != sha256.Size {
		return fmt.Errorf("key %s: the third field must be %s and the 64 hex digits of the key's SHA-256 (never the key itself)", name, DigestPrefix)
	}
	return k.add(Principal{Name: name, Scopes: s}, [32]byte(raw))
}

func (k *Keys) add(p Principal, digest [32]byte) error {
	if k.names == nil {
		k.names = map[string]bool{}
	}
	if k.names[p.Name] {
		return fmt.Errorf("key %s: name used twice", p.Name)
	}
	if _, dup := k.byDigest[digest]; dup {
		return fmt.Errorf("key %s: the same key is declared twice", p.Name)
	}
	k.names[p.Name] = true
	p.digest = digest
	k.byDigest[digest] = p
	return nil
}

// Len is the number of keys.
func (k *Keys) Len() int { return len(k.byDigest) }

// Lookup returns the key whose value is key.
func (k *Keys) Lookup(key string) (Principal, bool) {
	p, ok := k.byDigest[Digest(key)]
	return p, ok
}
