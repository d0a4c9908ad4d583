package config

import (
	"fmt"
	"io"
	"strings"
)

// WriteHelp prints what `program -help` shows: every variable of vars under its group,
// with its default, meaning and rules. Secrets' defaults are masked.
func WriteHelp(w io.Writer, program string, vars []*Var) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s [-help]\n\n", program)
	fmt.Fprintf(&b, "%s takes no arguments: it reads the environment variables below. An unset or\n", program)
	b.WriteString("empty variable takes its default; a bad value stops the start with every bad variable named.\n")
	group := "\x00"
	for _, v := range vars {
		if v.group != group {
			group = v.group
			b.WriteString("\n")
			if group != "" {
				fmt.Fprintf(&b, "%s:\n", group)
			}
		}
		fmt.Fprintf(&b, "  %s (%s)\n", v.name, helpDefault(v))
		line := v.usage
		if want := v.Want(); want != "" {
			line += "; " + want
		}
		fmt.Fprintf(&b, "      %s\n", line)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func helpDefault(v *Var) string {
	var parts []string
	if v.secret {
		parts = append(parts, "secret")
	}
	switch {
	case v.def == "":
		parts = append(parts, "no default")
	case v.secret:
		parts = append(parts, "default "+Mask(v.def))
	default:
		parts = append(parts, "default "+v.def)
	}
	return strings.Join(parts, ", ")
}

// Markdown renders vars as the rows of a Markdown table, header included: variable,
// default, meaning, valid values. Secrets are marked and their defaults masked.
func Markdown(vars []*Var) string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning | valid values |\n|---|---|---|---|\n")
	for _, v := range vars {
		b.WriteString(MarkdownRow(v))
		b.WriteByte('\n')
	}
	return b.String()
}

// MarkdownRow is v's row of Markdown's table, without the line end.
func MarkdownRow(v *Var) string {
	name := "`" + v.name + "`"
	if v.secret {
		name += " (secret)"
	}
	def := "none"
	switch {
	case v.docDef != "":
		def = v.docDef
	case v.def != "" && v.secret:
		def = Mask(v.def)
	case v.def != "":
		def = "`" + v.def + "`"
	}
	return "| " + strings.Join([]string{name, cell(def), cell(v.usage), cell(v.Want())}, " | ") + " |"
}

// cell escapes what would end a table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// Markers around a generated block of a document; name tells the blocks apart.
func beginMarker(name string) string { return "<!-- config:" + name + ":begin -->\n" }
func endMarker(name string) string   { return "<!-- config:" + name + ":end -->" }

// Block returns the text between the markers of block name in doc:
// <!-- config:NAME:begin --> and <!-- config:NAME:end -->, each on a line of its own.
func Block(doc, name string) (string, error) {
	start, end, err := blockBounds(doc, name)
	if err != nil {
		return "", err
	}
	return doc[start:end], nil
}

// ReplaceBlock returns doc with the text of block name replaced by content.
func ReplaceBlock(doc, name, content string) (string, error) {
	start, end, err := blockBounds(doc, name)
	if err != nil {
		return "", err
	}
	return doc[:start] + content + doc[end:], nil
}

func blockBounds(doc, name string) (start, end int, err error) {
	begin, stop := beginMarker(name), endMarker(name)
	i := strings.Index(doc, begin)
	if i < 0 || strings.Count(doc, begin) > 1 {
		return 0, 0, fmt.Errorf("want exactly one line %q", strings.TrimSpace(begin))
	}
	start = i + len(begin)
	j := strings.Index(doc[start:], stop)
	if j < 0 || strings.Count(doc, stop) > 1 {
		return 0, 0, fmt.Errorf("want exactly one line %q after %q", stop, strings.TrimSpace(begin))
	}
	return start, start + j, nil
}
