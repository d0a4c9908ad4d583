package migrate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Migration is one numbered CQL file.
type Migration struct {
	// Version is the file's number, e.g. 2 for 0002_user_status.cql.
	Version int
	// Name is the rest of the file name, e.g. "user_status".
	Name string
	// File is the file's base name, used in every message about it.
	File string
	// Statements are the file's statements, comments stripped, placeholders not yet
	// substituted (see Render).
	Statements []string
	// Checksum is the hex SHA-256 of the file's bytes. It is recorded when the migration
	// is applied; a later mismatch means someone edited an applied file.
	Checksum string
}

// fileRE is the pattern every *.cql file in a migrations directory must match.
var fileRE = regexp.MustCompile(`^([0-9]{4})_([a-z0-9][a-z0-9_]*)\.cql$`)

// Load reads the migrations in the root of fsys, ordered by version. Files that do not
// end in .cql are ignored, so a README can sit beside them; a .cql file that does not
// match NNNN_name.cql is an error, because silently skipping it would skip its schema.
// Versions need not be contiguous, but each may appear only once.
func Load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("reading migrations: %w", err)
	}
	var migrations []Migration
	byVersion := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(strings.ToLower(name), ".cql") {
			continue
		}
		m := fileRE.FindStringSubmatch(name)
		if m == nil {
			return nil, fmt.Errorf("%s: migration file names must look like NNNN_name.cql (four digits, then lower-case letters, digits and underscores)", name)
		}
		version, _ := strconv.Atoi(m[1]) // four digits always parse
		if version == 0 {
			return nil, fmt.Errorf("%s: versions start at 0001", name)
		}
		if other, dup := byVersion[version]; dup {
			return nil, fmt.Errorf("%s and %s: both have version %d", other, name, version)
		}
		byVersion[version] = name

		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("reading migration: %w", err)
		}
		stmts, err := splitStatements(string(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(stmts) == 0 {
			return nil, fmt.Errorf("%s: no statements", name)
		}
		sum := sha256.Sum256(data)
		migrations = append(migrations, Migration{
			Version:    version,
			Name:       m[2],
			File:       name,
			Statements: stmts,
			Checksum:   hex.EncodeToString(sum[:]),
		})
	}
	sort.Slice(migrations, func(i, j int) bool { return migrations[i].Version < migrations[j].Version })
	return migrations, nil
}

// splitStatements cuts CQL source into statements at each ';' that ends one. It knows
// enough CQL lexing to leave alone what only looks like an end: semicolons inside
// string literals in single quotes (a doubled quote escapes one), "quoted identifiers",
// $$dollar strings$$ and comments (--, // to the end of the line, /* blocks */).
// Comments are dropped and blank lines squeezed out, so an error message shows just
// the statement.
func splitStatements(src string) ([]string, error) {
	var (
		stmts []string
		cur   []byte
	)
	lineAt := func(i int) int { return strings.Count(src[:i], "\n") + 1 }
	flush := func() {
		if s := strings.TrimSpace(string(cur)); s != "" {
			stmts = append(stmts, s)
		}
		cur = cur[:0]
	}
	// trimLine drops the blanks at the end of cur. Whatever they are, they were written
	// outside a literal, since literals end in a quote or a dollar sign.
	trimLine := func() {
		for len(cur) > 0 && (cur[len(cur)-1] == ' ' || cur[len(cur)-1] == '\t' || cur[len(cur)-1] == '\r') {
			cur = cur[:len(cur)-1]
		}
	}

	for i := 0; i < len(src); {
		c := src[i]
		rest := src[i:]
		switch {
		case c == '\'' || c == '"':
			// A doubled quote is an escaped quote; scanning on past it handles that.
			j := i + 1
			for {
				k := strings.IndexByte(src[j:], c)
				if k < 0 {
					kind := "string literal"
					if c == '"' {
						kind = "quoted identifier"
					}
					return nil, fmt.Errorf("unterminated %s starting on line %d", kind, lineAt(i))
				}
				j += k + 1
				if j < len(src) && src[j] == c {
					j++
					continue
				}
				break
			}
			cur = append(cur, src[i:j]...)
			i = j
		case strings.HasPrefix(rest, "$$"):
			k := strings.Index(src[i+2:], "$$")
			if k < 0 {
				return nil, fmt.Errorf("unterminated $$ string starting on line %d", lineAt(i))
			}
			j := i + 2 + k + 2
			cur = append(cur, src[i:j]...)
			i = j
		case strings.HasPrefix(rest, "--") || strings.HasPrefix(rest, "//"):
			k := strings.IndexByte(rest, '\n')
			if k < 0 {
				k = len(rest)
			}
			i += k // the newline itself is handled as ordinary text
		case strings.HasPrefix(rest, "/*"):
			k := strings.Index(rest[2:], "*/")
			if k < 0 {
				return nil, fmt.Errorf("unterminated /* comment starting on line %d", lineAt(i))
			}
			// The comment separates tokens: keep exactly one blank in its place.
			trimLine()
			i += 2 + k + 2
			if len(cur) > 0 && cur[len(cur)-1] != '\n' && i < len(src) && !strings.ContainsRune(" \t\r\n", rune(src[i])) {
				cur = append(cur, ' ')
			}
		case c == ';':
			flush()
			i++
		case c == '\n':
			trimLine()
			if len(cur) > 0 && cur[len(cur)-1] != '\n' {
				cur = append(cur, '\n')
			}
			i++
		default:
			cur = append(cur, c)
			i++
		}
	}
	flush()
	return stmts, nil
}

// Placeholders are the names Render substitutes, written {{name}} in a file.
const (
	PlaceholderKeyspace    = "{{keyspace}}"
	PlaceholderReplication = "{{replication}}"
)

var leftoverRE = regexp.MustCompile(`\{\{[^{}]*\}\}`)

// errLeftover is wrapped by Render's error for a placeholder it does not know.
var errLeftover = errors.New("unknown placeholder")

// Render returns the migration's statements with {{keyspace}} and {{replication}}
// substituted. Any other {{...}} left in a statement is an error: sending it would fail
// on the server with a far less helpful message, or worse, succeed with a wrong name.
func (m Migration) Render(keyspace, replication string) ([]string, error) {
	r := strings.NewReplacer(PlaceholderKeyspace, keyspace, PlaceholderReplication, replication)
	out := make([]string, len(m.Statements))
	for i, s := range m.Statements {
		s = r.Replace(s)
		if strings.Contains(s, "{{") {
			left := leftoverRE.FindString(s)
			if left == "" {
				left = "{{"
			}
			return nil, fmt.Errorf("%s: statement %d: %w %s (known: %s, %s)", m.File, i+1, errLeftover, left, PlaceholderKeyspace, PlaceholderReplication)
		}
		out[i] = s
	}
	return out, nil
}
