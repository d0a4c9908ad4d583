package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pulse-presence/pulse/internal/api/auth"
)

// keys new makes an API key (docs/design.md, Security): it prints the key once, for
// the client, and the line that declares it in the services' PULSE_API_KEYS_FILE,
// which holds only its digest. Pulse keeps no copy of the key.
func runKeys(_ context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "new" {
		return errors.New("usage: pulsectl keys new -scope write|read|operator[,…] [-name NAME]")
	}
	fs := flag.NewFlagSet("keys new", flag.ContinueOnError)
	scopes := fs.String("scope", "", "the key's scopes, comma-separated: write (ingest), read (query), operator (query's operator view; implies read)")
	name := fs.String("name", "", "the key's name in logs and metrics (default: the scopes and today's date)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("keys new takes no arguments, got %q", fs.Args())
	}
	if *scopes == "" {
		return errors.New("-scope is required: write, read or operator, comma-separated")
	}
	s, err := auth.ParseScopes(*scopes)
	if err != nil {
		return fmt.Errorf("-scope: %w", err)
	}
	if *name == "" {
		// Key names allow no comma: "read,operator" becomes "read_operator".
		*name = strings.ReplaceAll(s.String(), ",", "_") + "-" + time.Now().UTC().Format("2006-01-02")
	}
	key, err := auth.NewKey()
	if err != nil {
		return err
	}
	line := auth.Line(*name, s, key)
	// Check the line as the services will read it, name included.
	if _, err := auth.ParseKeys(strings.NewReader(line), "the new line"); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "key (give it to the client; it is shown only now):\n  %s\n", key)
	fmt.Fprintf(stdout, "line for %s (the digest only):\n  %s\n", auth.KeysFileEnv, line)
	fmt.Fprintln(stdout, "ingest and query read the keys file again within PULSE_API_KEYS_RELOAD (10s by default) of a change.")
	return nil
}
