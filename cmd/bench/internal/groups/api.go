package groups

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// api calls the phase's query instance with its API key.
type api struct {
	base string
	key  string
	c    *http.Client
}

func newAPI(addr, key string, conns int) *api {
	return &api{base: "http://" + addr, key: key,
		c: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}}
}

// Deadlines of one call: a membership write of 100,000 ids is megabytes each way and
// waits for Kafka's acknowledgement of every event.
const (
	readTimeout  = 10 * time.Second
	writeTimeout = 2 * time.Minute
)

// do makes one request and reads its whole answer; took is from just before the
// request was sent to the answer's last byte.
func (a *api) do(ctx context.Context, method, path string, body []byte, timeout time.Duration) (status int, answer []byte, took time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return 0, nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	t := time.Now()
	resp, err := a.c.Do(req)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	answer, err = io.ReadAll(resp.Body)
	took = time.Since(t)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	return resp.StatusCode, answer, took, nil
}

// memberWrite is the answer to a membership write.
type memberWrite struct {
	Joins  int `json:"joins"`
	Leaves int `json:"leaves"`
}

// writeMembers is PATCH (add ids) or PUT (the members become ids) of group's members;
// it checks the 202 and that every id was posted as a join.
func (a *api) writeMembers(ctx context.Context, method, group string, ids []string) (time.Duration, error) {
	var body any = map[string][]string{"add": ids}
	if method == http.MethodPut {
		body = map[string][]string{"userIds": ids}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	path := "/v1/groups/" + url.PathEscape(group) + "/members"
	status, answer, took, err := a.do(ctx, method, path, b, writeTimeout)
	if err != nil {
		return 0, err
	}
	if status != http.StatusAccepted {
		return 0, fmt.Errorf("%s %s: HTTP %d: %s", method, path, status, clip(answer))
	}
	var w memberWrite
	if err := json.Unmarshal(answer, &w); err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if w.Joins != len(ids) || w.Leaves != 0 {
		return 0, fmt.Errorf("%s %s: %d joins and %d leaves posted for %d new members", method, path, w.Joins, w.Leaves, len(ids))
	}
	return took, nil
}

// groupCount is the answer of GET /v1/groups/{id}/online/count.
type groupCount struct {
	GroupID  string            `json:"groupId"`
	Total    uint64            `json:"total"`
	ByStatus map[string]uint64 `json:"byStatus"`
	Members  uint64            `json:"members"`
}

// count reads group's count.
func (a *api) count(ctx context.Context, group string) (groupCount, time.Duration, error) {
	path := "/v1/groups/" + url.PathEscape(group) + "/online/count"
	var c groupCount
	status, answer, took, err := a.do(ctx, http.MethodGet, path, nil, readTimeout)
	if err != nil {
		return c, 0, err
	}
	if status != http.StatusOK {
		return c, 0, fmt.Errorf("GET %s: HTTP %d: %s", path, status, clip(answer))
	}
	if err := json.Unmarshal(answer, &c); err != nil {
		return c, 0, fmt.Errorf("GET %s: %w", path, err)
	}
	return c, took, nil
}

// check says whether c is a group of members members, online of them online, and
// nobody idle or invisible (the bulk load has no such users).
func (c groupCount) check(members, online int64) error {
	if c.Members != uint64(members) || c.ByStatus["online"] != uint64(online) || c.Total != uint64(online) || c.ByStatus["idle"] != 0 {
		return fmt.Errorf("group %s counts %d members, %d online, %d idle, total %d; want %d members, %d online",
			c.GroupID, c.Members, c.ByStatus["online"], c.ByStatus["idle"], c.Total, members, online)
	}
	return nil
}

// page is the answer of GET /v1/groups/{id}/online.
type page struct {
	Users []struct {
		UserID string `json:"userId"`
		Status string `json:"status"`
	} `json:"users"`
	NextCursor *string `json:"nextCursor"`
}

// online reads a page of up to limit of group's online members from cursor ("": the
// first page).
func (a *api) online(ctx context.Context, group string, limit int, cursor string) (page, time.Duration, error) {
	q := url.Values{"limit": {fmt.Sprint(limit)}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := "/v1/groups/" + url.PathEscape(group) + "/online?" + q.Encode()
	var p page
	status, answer, took, err := a.do(ctx, http.MethodGet, path, nil, readTimeout)
	if err != nil {
		return p, 0, err
	}
	if status != http.StatusOK {
		return p, 0, fmt.Errorf("GET %s: HTTP %d: %s", path, status, clip(answer))
	}
	if err := json.Unmarshal(answer, &p); err != nil {
		return p, 0, fmt.Errorf("GET %s: %w", path, err)
	}
	return p, took, nil
}

// clip is an answer short enough for an error message.
func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
