package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/stores/eventlog"
	"github.com/pulse-presence/pulse/services/query/online"
)

// Groups (docs/design.md, "Groups"): a group is a set of users whose presence is read
// together — a channel, a team, a game server. Membership is written as member events
// on presence.events, which the aggregator folds into per-shard member bitmaps and
// per-group counts beside the status bitmaps; so a group's count is one small read
// per shard whatever its size, and the log rebuilds groups as it rebuilds statuses.
//
// Writes need the write scope, reads the read scope. A user token may read the groups
// its user is a member of (membership as the aggregator last folded it), and write none.

const (
	// maxGroupWriteIDs bounds the user ids of one membership write; a larger group
	// is built by several PATCHes.
	maxGroupWriteIDs = 100_000
	// groupWriteMaxBody fits maxGroupWriteIDs ids of the longest length.
	groupWriteMaxBody = 16 << 20
	// idsPerWrite: a membership write costs one read per 100 ids it posts.
	idsPerWrite = 100
	// membersPage is how many members one round of a replace reads.
	membersPage = 10_000
)

// groupRoutes are the group routes; their write methods need the write scope
// (installAuth).
const (
	groupMembersPath = "/v1/groups/:groupId/members"
	groupCountPath   = "/v1/groups/:groupId/online/count"
	groupOnlinePath  = "/v1/groups/:groupId/online"
)

// groupWriteRoutes are the routes that post member events: "METHOD path".
var groupWriteRoutes = []string{
	http.MethodPut + " " + groupMembersPath,
	http.MethodPatch + " " + groupMembersPath,
	http.MethodDelete + " " + groupMembersPath,
}

// groups serves the group routes.
type groups struct {
	*api
	producer *eventlog.Producer
	now      func() time.Time
}

func (a *api) groupRoutes(e *echo.Echo, producer *eventlog.Producer) {
	h := &groups{api: a, producer: producer, now: time.Now}
	e.PUT(groupMembersPath, h.replace)
	e.PATCH(groupMembersPath, h.patch)
	e.DELETE(groupMembersPath, h.clear)
	e.GET(groupMembersPath, h.members)
	e.GET(groupCountPath, h.count)
	e.GET(groupOnlinePath, h.online)
}

func groupIDParam(c echo.Context) (string, error) {
	// Echo routes by the escaped path, and keeps its segments escaped, when the
	// request escaped more than it needs to (j%40m for j@m).
	id := c.Param("groupId")
	if c.Request().URL.RawPath != "" {
		var err error
		if id, err = url.PathUnescape(id); err != nil {
			return "", httpserver.BadRequest("groupId", "is not a valid URL path segment")
		}
	}
	if err := presence.ValidateGroupID(id); err != nil {
		return "", httpserver.BadRequest("groupId", err.Error())
	}
	return id, nil
}

// writableGroup is the group a membership write names; user tokens write none (the
// guard lets them reach the members route, for GET).
func writableGroup(c echo.Context) (string, error) {
	if p := auth.PrincipalOf(c); p.UserID != "" {
		return "", auth.Forbidden(fmt.Sprintf("a user token may not write a group's members; %s needs an API key with the write scope", c.Request().Method))
	}
	return groupIDParam(c)
}

// readableGroup is the group a read names, once the reader may read it: any group
// for an API key, only its user's groups for a user token.
func (h *groups) readableGroup(c echo.Context) (string, error) {
	g, err := groupIDParam(c)
	if err != nil {
		return "", err
	}
	user := auth.PrincipalOf(c).UserID
	if user == "" {
		return g, nil
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	n, err := h.store.Shards(ctx)
	if err != nil {
		return "", h.readErr(err)
	}
	member, err := h.store.IsMember(ctx, n, g, user)
	if err != nil {
		return "", h.readErr(err)
	}
	if !member {
		return "", auth.Forbidden(fmt.Sprintf("a user token reads only the groups its user is a member of; %q is not a member of %q", user, g))
	}
	return g, nil
}

// memberWrite is what a membership write posted: events, not yet folded.
type memberWrite struct {
	GroupID string `json:"groupId"`
	// Joins and Leaves are the member events posted; the aggregator applies them
	// within a window (joining twice, or leaving a group one is not in, changes
	// nothing).
	Joins  int `json:"joins"`
	Leaves int `json:"leaves"`
}

type replaceRequest struct {
	UserIDs []string `json:"userIds"`
}

type patchRequest struct {
	Add    []string `json:"add"`
	Remove []string `json:"remove"`
}

// checkIDs validates ids of field; duplicates are refused, as they are a caller's
// mistake that would otherwise count twice against the group's size.
func checkIDs(field string, ids []string, seen map[string]string) error {
	for i, id := range ids {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := presence.ValidateID(id, presence.MaxUserIDLen); err != nil {
			return httpserver.BadRequest(f, err.Error())
		}
		if prev, ok := seen[id]; ok {
			return httpserver.BadRequest(f, fmt.Sprintf("user %q is also %s", id, prev))
		}
		seen[id] = f
	}
	return nil
}

// refuseNull refuses a null for any of fields of the JSON object body, which Go would
// read as absent: the document gives each an array or nothing.
func refuseNull(body []byte, fields ...string) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return httpserver.BadRequest("body", "must be a JSON object")
	}
	for _, f := range fields {
		if v, ok := raw[f]; ok && string(v) == "null" {
			return httpserver.BadRequest(f, "must be an array of user ids, not null; leave it out for none")
		}
	}
	return nil
}

func tooManyIDs(field string, n int) error {
	return refused(reasonTooManyIDs, httpserver.BadRequest(field,
		fmt.Sprintf("at most %d user ids per membership write, got %d; build a larger group with several PATCHes", maxGroupWriteIDs, n)))
}

// replace is PUT /v1/groups/{groupId}/members: the group's members become exactly
// userIds. It posts leaves for the members not listed and joins for the listed users
// not members, as of the read it starts with.
func (h *groups) replace(c echo.Context) error {
	g, err := writableGroup(c)
	if err != nil {
		return err
	}
	body, err := httpserver.ReadBody(c, max(h.maxBody, groupWriteMaxBody))
	if err != nil {
		return err
	}
	var req replaceRequest
	if err := httpserver.DecodeObject(body, &req, ""); err != nil {
		return err
	}
	if req.UserIDs == nil {
		return httpserver.BadRequest("userIds", "is required; [] empties the group")
	}
	if len(req.UserIDs) > maxGroupWriteIDs {
		return tooManyIDs("userIds", len(req.UserIDs))
	}
	if err := checkIDs("userIds", req.UserIDs, map[string]string{}); err != nil {
		return err
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	current, err := h.allMembers(ctx, g)
	if err != nil {
		return h.readErr(err)
	}
	if err := h.limits.charge(c, writeCost(len(req.UserIDs)+len(current))); err != nil {
		return err
	}
	want := make(map[string]bool, len(req.UserIDs))
	for _, id := range req.UserIDs {
		want[id] = true
	}
	var joins, leaves []string
	for _, id := range current {
		if !want[id] {
			leaves = append(leaves, id)
		}
		delete(want, id)
	}
	for _, id := range req.UserIDs {
		if want[id] {
			joins = append(joins, id)
		}
	}
	return h.post(c, g, joins, leaves)
}

// patch is PATCH /v1/groups/{groupId}/members: add and remove users.
func (h *groups) patch(c echo.Context) error {
	g, err := writableGroup(c)
	if err != nil {
		return err
	}
	body, err := httpserver.ReadBody(c, max(h.maxBody, groupWriteMaxBody))
	if err != nil {
		return err
	}
	var req patchRequest
	if err := httpserver.DecodeObject(body, &req, ""); err != nil {
		return err
	}
	if err := refuseNull(body, "add", "remove"); err != nil {
		return err
	}
	if req.Add == nil && req.Remove == nil {
		return httpserver.BadRequest("add", "add or remove is required")
	}
	if n := len(req.Add) + len(req.Remove); n > maxGroupWriteIDs {
		return tooManyIDs("add", n)
	}
	seen := map[string]string{}
	if err := checkIDs("add", req.Add, seen); err != nil {
		return err
	}
	if err := checkIDs("remove", req.Remove, seen); err != nil {
		return err
	}
	if err := h.limits.charge(c, writeCost(len(req.Add)+len(req.Remove))); err != nil {
		return err
	}
	return h.post(c, g, req.Add, req.Remove)
}

// clear is DELETE /v1/groups/{groupId}/members: every member leaves.
func (h *groups) clear(c echo.Context) error {
	g, err := writableGroup(c)
	if err != nil {
		return err
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	current, err := h.allMembers(ctx, g)
	if err != nil {
		return h.readErr(err)
	}
	if err := h.limits.charge(c, writeCost(len(current))); err != nil {
		return err
	}
	return h.post(c, g, nil, current)
}

func writeCost(ids int) int { return max(costRequest, ceilDiv(ids, idsPerWrite)) }

// allMembers reads every member of group g.
func (h *groups) allMembers(ctx context.Context, g string) ([]string, error) {
	n, err := h.store.Shards(ctx)
	if err != nil || n == 0 {
		return nil, err
	}
	var out []string
	var pos online.Position
	for pos.Shard < n {
		var ids []string
		if ids, pos, err = online.Members(ctx, h.store, n, g, membersPage, pos); err != nil {
			return nil, err
		}
		out = append(out, ids...)
	}
	return out, nil
}

// post checks the group's size cap and posts the member events of joins and leaves,
// answering 202 once Kafka acknowledged them all.
func (h *groups) post(c echo.Context, g string, joins, leaves []string) error {
	ctx, cancel := h.ctx(c)
	defer cancel()
	if len(joins) > len(leaves) {
		size, err := h.size(ctx, g)
		if err != nil {
			return h.readErr(err)
		}
		if grow := uint64(len(joins) - len(leaves)); size+grow > presence.MaxGroupMembers {
			return &httpserver.Error{Status: http.StatusConflict, Code: "group_full",
				Message: fmt.Sprintf("group %q has %d members; %d more would pass the cap of %d", g, size, grow, presence.MaxGroupMembers)}
		}
	}
	now := h.now().UTC().Truncate(time.Microsecond)
	events := make([]presence.Event, 0, len(joins)+len(leaves))
	add := func(id string, leave bool) error {
		eid, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("making an event id: %w", err)
		}
		e := presence.Event{ID: eid.String(), UserID: id, Kind: presence.KindMember, DeviceID: presence.AllDevices,
			ReceivedAt: now, Source: presence.SourceAPI, GroupID: g, Leave: leave}
		if err := e.Validate(); err != nil {
			return fmt.Errorf("member event: %w", err)
		}
		events = append(events, e)
		return nil
	}
	for _, id := range leaves {
		if err := add(id, true); err != nil {
			return err
		}
	}
	for _, id := range joins {
		if err := add(id, false); err != nil {
			return err
		}
	}
	if len(events) > 0 {
		pctx, pcancel := context.WithTimeout(c.Request().Context(), time.Minute)
		defer pcancel()
		if err := h.producer.Produce(pctx, auth.PrincipalOf(c).Name, events); err != nil {
			return fmt.Errorf("%w: %w", httpserver.Unavailable("Kafka did not acknowledge the member events; retry the request (it is idempotent)", time.Second), err)
		}
	}
	return httpserver.JSON(c, http.StatusAccepted, memberWrite{GroupID: g, Joins: len(joins), Leaves: len(leaves)})
}

// size is group g's member count.
func (h *groups) size(ctx context.Context, g string) (uint64, error) {
	n, err := h.store.Shards(ctx)
	if err != nil || n == 0 {
		return 0, err
	}
	counts, err := h.store.GroupCounts(ctx, n, g)
	if err != nil {
		return 0, err
	}
	var size uint64
	for _, sc := range counts {
		size += sc.Registered
	}
	return size, nil
}

type memberList struct {
	UserIDs    []string `json:"userIds"`
	NextCursor *string  `json:"nextCursor"`
}

// members is GET /v1/groups/{groupId}/members: the members, whatever their status,
// by pages behind a cursor.
func (h *groups) members(c echo.Context) error {
	g, err := h.readableGroup(c)
	if err != nil {
		return err
	}
	for name := range c.QueryParams() {
		if name != "limit" && name != "cursor" {
			return httpserver.BadRequest(name, "unknown parameter; want limit or cursor")
		}
	}
	q, err := parseListQuery(c.QueryParams(), false, h.cursors)
	if err != nil {
		return err
	}
	if err := h.limits.charge(c, pageCost(q.limit, false)); err != nil {
		return err
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	n, err := h.store.Shards(ctx)
	if err != nil {
		return h.readErr(err)
	}
	res := memberList{UserIDs: []string{}}
	if n == 0 {
		return httpserver.JSON(c, http.StatusOK, res)
	}
	var pos online.Position
	if q.cursor != nil {
		if q.cursor.Shards != n {
			return httpserver.BadRequest("cursor", fmt.Sprintf("belongs to a state of %d shards, which now has %d; start the listing again", q.cursor.Shards, n))
		}
		pos = q.cursor.Pos
	}
	guard, err := h.store.GuardShards(ctx, n)
	if err != nil {
		return h.readErr(err)
	}
	ids, next, err := online.Members(ctx, h.store, n, g, q.limit, pos)
	if err != nil {
		return h.readErr(err)
	}
	if err := h.store.Unchanged(ctx, guard); err != nil {
		return h.readErr(err)
	}
	res.UserIDs = append(res.UserIDs, ids...)
	if next.Shard < n {
		s := h.cursors.Sign(online.Cursor{Shards: n, Pos: next}.Encode())
		res.NextCursor = &s
	}
	return httpserver.JSON(c, http.StatusOK, res)
}

// groupCountView is a group's count: countView with members for registered.
type groupCountView struct {
	GroupID  string            `json:"groupId"`
	Total    uint64            `json:"total"`
	ByStatus map[string]uint64 `json:"byStatus"`
	Members  uint64            `json:"members"`
	AsOf     time.Time         `json:"asOf"`
}

// count is GET /v1/groups/{groupId}/online/count: the group's members by status,
// read from the counts the aggregator keeps per group and shard (never cached).
func (h *groups) count(c echo.Context) error {
	g, err := h.readableGroup(c)
	if err != nil {
		return err
	}
	for name := range c.QueryParams() {
		if name != "view" && name != "at" {
			return httpserver.BadRequest(name, "unknown parameter; want view or at")
		}
	}
	if at, past, err := h.atParam(c); err != nil || past {
		return h.or(err, func() error { return h.pastGroupCount(c, g, at) })
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	n, err := h.store.Shards(ctx)
	if err != nil {
		return h.readErr(err)
	}
	counts, err := h.store.GroupCounts(ctx, n, g)
	if err != nil {
		return h.readErr(err)
	}
	var m, on, idle, inv uint64
	for _, sc := range counts {
		m, on, idle, inv = m+sc.Registered, on+sc.Online, idle+sc.Idle, inv+sc.Invisible
	}
	v := groupCountView{GroupID: g, Members: m, AsOf: h.now().UTC()}
	if auth.OperatorView(c) {
		v.Total = on + idle + inv
		v.ByStatus = map[string]uint64{"online": on, "idle": idle, "invisible": inv, "offline": m - on - idle - inv}
	} else {
		// Invisible members count as offline to readers.
		v.Total = on + idle
		v.ByStatus = map[string]uint64{"online": on, "idle": idle, "offline": m - on - idle}
	}
	return httpserver.JSON(c, http.StatusOK, v)
}

// online is GET /v1/groups/{groupId}/online: the listing of GET /v1/online limited to
// the group's members.
func (h *groups) online(c echo.Context) error {
	g, err := h.readableGroup(c)
	if err != nil {
		return err
	}
	return h.onlinePage(c, g, h.now, func(at time.Time, n int, q listQuery) error { return h.pastGroupList(c, g, at, n, q) })
}
