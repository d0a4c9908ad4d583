package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"
)

// forget erases one user (docs/design.md, "Erasure") through query's DELETE
// /v1/users/{id}, with the operator key (PULSE_OPERATOR_KEY) like the commands that
// read a user's history. The erasure is an event in the log: query answers once Kafka
// acknowledged it, and the aggregator and history erase the user as they fold it.
func runForget(ctx context.Context, args []string, stdout io.Writer) error {
	return runForgetEnv(ctx, args, stdout, os.Getenv)
}

// erased is query's answer to an erasure.
type erased struct {
	UserID   string    `json:"userId"`
	EventID  string    `json:"eventId"`
	ErasedAt time.Time `json:"erasedAt"`
}

func runForgetEnv(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	const usage = "forget USER"
	fs, f := newQueryFlags("forget", getenv, "query service base URL (env PULSE_QUERY_URL); the erasure sends PULSE_OPERATOR_KEY (scope operator)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: pulsectl %s\n", usage)
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\nErases USER everywhere Pulse keeps them: state, devices, groups and custom status in Redis, every history row in Cassandra. Their events dated at or before the erasure that arrive later are dropped; later ones start a new user.")
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("usage: pulsectl %s", usage)
	}
	if !f.operator {
		return errors.New("forget needs PULSE_OPERATOR_KEY, an API key with the operator scope")
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	hc, err := httpClient(*f.ca, 0)
	if err != nil {
		return err
	}
	c := &queryClient{base: f.url, token: f.token, operator: true, http: hc}
	hint := func(status int) string {
		if status == http.StatusForbidden || status == http.StatusUnauthorized {
			return " (PULSE_OPERATOR_KEY must be an API key with the operator scope)"
		}
		return ""
	}
	var ans erased
	if err := c.do(ctx, http.MethodDelete, "/v1/users/"+url.PathEscape(pos[0]), nil, nil, f.token, hint, &ans); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "erased %s at %s (event %s): state, devices, groups and history go as the aggregator and history read it\n",
		ans.UserID, ans.ErasedAt.Format(time.RFC3339Nano), ans.EventID)
	return err
}
