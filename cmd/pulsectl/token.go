package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/pulse-presence/pulse/internal/api/auth"
)

// token mints a user token for the verifier the services are configured with through
// the same variables (PULSE_JWT_HS256_SECRET, PULSE_JWT_ISSUER, PULSE_JWT_AUDIENCE):
// the local stack's development verifier, or a test deployment's. A platform mints
// its users' tokens in its own login service.
func runToken(_ context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	user := fs.String("user", "", "the user id the token acts for (its sub)")
	watch := fs.String("watch", "", "users the token may also watch on the change feed, comma-separated")
	ttl := fs.Duration("ttl", time.Hour, "how long the token lives (at most the services' PULSE_JWT_MAX_AGE, 24h by default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("token takes no arguments, got %q", fs.Args())
	}
	if *user == "" {
		return errors.New("-user is required")
	}
	secret := os.Getenv("PULSE_JWT_HS256_SECRET")
	if secret == "" {
		return errors.New("PULSE_JWT_HS256_SECRET is not set: the secret the services verify HS256 user tokens with " +
			"(make run prints how to set the local stack's)")
	}
	var ids []string
	if *watch != "" {
		ids = strings.Split(*watch, ",")
	}
	tok, err := auth.MintUserToken(secret, auth.UserToken{
		User: *user, Watch: ids, TTL: *ttl, Now: time.Now(),
		Issuer: os.Getenv("PULSE_JWT_ISSUER"), Audience: os.Getenv("PULSE_JWT_AUDIENCE"),
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}
