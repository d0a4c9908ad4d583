// Package logging builds the structured logger every Pulse process writes with.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

// New returns a logger writing to w at the given level ("debug", "info", "warn",
// "error") in the given format ("json" for machines, "text" for people).
func New(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("log format %q: want json or text", format)
	}
}

// Config is how a process logs.
type Config struct {
	Level  string
	Format string
}

// Vars are the logging rows of every service's configuration table.
func Vars(c *Config) []*config.Var {
	return config.Group("logging",
		config.String(&c.Level, "PULSE_LOG_LEVEL", "info", "least severe level logged", validLevel),
		config.String(&c.Format, "PULSE_LOG_FORMAT", "json", "json for machines, text for people", config.OneOf("json", "text")),
	)
}

// validLevel accepts what New accepts: a level name in any case.
func validLevel(level string) (string, bool) {
	var lv slog.Level
	return "want debug, info, warn or error", lv.UnmarshalText([]byte(level)) == nil
}
