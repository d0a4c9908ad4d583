package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"time"
)

// pulsectl online [-at TIME] [-count] [-status S]: who is online now, or at an instant
// of the past (GET /v1/online/count and GET /v1/online, with at=), following the
// listing's cursor to the end.
func runOnline(ctx context.Context, args []string, stdout io.Writer) error {
	return runOnlineEnv(ctx, args, stdout, os.Getenv)
}

// onlinePage and onlineCount are the answers of the listing and the count.
type (
	onlinePage struct {
		Users []struct {
			UserID string `json:"userId"`
			Status string `json:"status"`
		} `json:"users"`
		NextCursor *string `json:"nextCursor"`
		Final      *bool   `json:"final"`
	}
	onlineCount struct {
		Total    uint64            `json:"total"`
		ByStatus map[string]uint64 `json:"byStatus"`
		Final    *bool             `json:"final"`
	}
)

func runOnlineEnv(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	fs, f := newReadFlags("online", getenv, "", "")
	at := fs.String("at", "", "an instant of the past (RFC 3339, e.g. 2026-11-22T20:13:07Z): who was online then; default now")
	count := fs.Bool("count", false, "print the counts per status only, not the users")
	status := fs.String("status", "", "list only this status: online, idle or invisible (invisible needs PULSE_OPERATOR_KEY)")
	return runAnalytics(ctx, fs, f, args, 0, "online [-at TIME] [-count] [-status S] [-csv]", stdout,
		func(ctx context.Context, c *queryClient, _ []string) (*table, error) {
			q := url.Values{}
			if *at != "" {
				t, err := time.Parse(time.RFC3339Nano, *at)
				if err != nil {
					return nil, fmt.Errorf("-at: want an RFC 3339 time such as 2026-11-22T20:13:07Z, got %q", *at)
				}
				q.Set("at", t.UTC().Format(time.RFC3339Nano))
			}
			if *count {
				var ans onlineCount
				if err := c.get(ctx, "/v1/online/count", q, &ans); err != nil {
					return nil, err
				}
				t := &table{header: []string{"STATUS", "USERS"}}
				for _, s := range []string{"online", "idle", "invisible"} {
					if n, ok := ans.ByStatus[s]; ok {
						t.add(s, fmtInt(n))
					}
				}
				t.add("total", fmtInt(ans.Total))
				t.note = provisionalNote(ans.Final)
				return t, nil
			}
			if *status != "" {
				q.Set("status", *status)
			}
			q.Set("limit", strconv.Itoa(1000))
			t := &table{header: []string{"USER", "STATUS"}}
			for {
				var page onlinePage
				if err := c.get(ctx, "/v1/online", q, &page); err != nil {
					return nil, err
				}
				for _, u := range page.Users {
					t.add(u.UserID, u.Status)
				}
				if page.Final != nil && !*page.Final {
					t.note = provisionalNote(page.Final)
				}
				if page.NextCursor == nil {
					return t, nil
				}
				q.Set("cursor", *page.NextCursor)
			}
		})
}

// provisionalNote says, under an answer of the recent past, that it is not final.
func provisionalNote(final *bool) string {
	if final == nil || *final {
		return ""
	}
	return "provisional: the instant is inside history's lateness; a change that reaches history late may still alter this answer"
}
