package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/api/customjson"
	"github.com/pulse-presence/pulse/internal/api/historyapi"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/shard"
	"github.com/pulse-presence/pulse/internal/platform/cursor"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// The operator's export of one user (GET /v1/users/{userId}/export, docs/query.md,
// "Export"): everything Pulse holds about them in one JSON document, for a support
// case or a data subject's request. From Redis, the live state as operators see it,
// every field of it, and the groups whose member bitmaps hold the user. From
// Cassandra, the user_status row, every user_activity row within the export's reach
// (PULSE_QUERY_EXPORT_RETENTION), the sessions and days of that range, and the
// user_indexes row. Every call is audited: one info line naming the user and the
// credential's name (never the key), whatever the answer (audit.go).
//
// Paged, not streamed. The timeline of a user who heartbeats with
// PULSE_HISTORY_EVENT_ROWS=all is thousands of rows a day, so the export cannot be one
// answer held in memory. Streaming it would make one request's cost, duration and
// memory unbounded and its failure half way a truncated 200; paging keeps the export a
// history route like the others: each page's work is bounded (at most limit timeline
// entries, at most PULSE_QUERY_HISTORY_READS_PER_REQUEST day partitions read at once,
// each asked for no more rows than the page lacks; at most maxSessions sessions and
// one row per day of the range), charged to its credential before anything is read
// (costs.go), done under PULSE_QUERY_HISTORY_TIMEOUT, and a failure is a 503 the
// client retries with the same cursor. The cursor is internal/platform/cursor's
// signed envelope, as every cursor query hands out, bound to the user and to the
// first page's instant, so every page walks the same range. The first page carries
// every section; the pages after it only the timeline's continuation. pulsectl export
// follows the cursor and prints the document whole.

// exportAhead is how far past exportedAt the timeline reaches: ingest takes events
// dated up to PULSE_INGEST_MAX_SKEW ahead of its clock, and history files them under
// their own time.
const exportAhead = 24 * time.Hour

// defaultExportRetention is PULSE_QUERY_EXPORT_RETENTION's default, for handlers built
// without a configuration (unit tests).
const defaultExportRetention = 400 * day

// exportCursor is where the next page of an export goes on: the first page's instant
// and the start of its range, the user (the first 8 bytes of the SHA-256 of the id),
// and the last timeline entry answered.
type exportCursor struct {
	ExportedAt time.Time // microseconds
	From       time.Time // a UTC midnight
	User       [8]byte
	Pos        timelineCursor
}

// exportFormat's version differs from the timeline's and the daily page's, so no route
// reads another's cursors.
var exportFormat = cursor.Format{Version: 3, MinBody: 32, MaxLen: 1024}

func exportUser(id string) (u [8]byte) {
	sum := sha256.Sum256([]byte(id))
	copy(u[:], sum[:])
	return u
}

func (c exportCursor) Encode() string {
	b := binary.BigEndian.AppendUint64(nil, uint64(c.ExportedAt.UnixMicro()))
	b = binary.BigEndian.AppendUint64(b, uint64(c.From.UnixMilli()))
	b = append(b, c.User[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Pos.At.UnixMilli()))
	return exportFormat.Encode(append(b, c.Pos.EntryID...))
}

func decodeExportCursor(s string) (exportCursor, error) {
	b, err := exportFormat.Decode(s)
	if err != nil {
		return exportCursor{}, err
	}
	c := exportCursor{
		ExportedAt: time.UnixMicro(int64(binary.BigEndian.Uint64(b))).UTC(),
		From:       time.UnixMilli(int64(binary.BigEndian.Uint64(b[8:]))).UTC(),
		Pos:        timelineCursor{At: time.UnixMilli(int64(binary.BigEndian.Uint64(b[24:]))).UTC(), EntryID: string(b[32:])},
	}
	copy(c.User[:], b[16:24])
	if !c.From.Before(c.ExportedAt) || c.Pos.At.Before(c.From) {
		return c, fmt.Errorf("%w: a position outside its export's range", cursor.ErrInvalid)
	}
	return c, nil
}

const badExportCursor = "is not a cursor this route returned for this user; send the nextCursor of the previous page of the same user's export, or none"

// exportPath is the export's route template.
const exportPath = "/v1/users/:userId/export"

// export is GET /v1/users/{userId}/export.
func (h *historyHandlers) export(c echo.Context) error {
	rec := auditOf(c)
	if !auth.IsOperator(c) {
		p := auth.PrincipalOf(c)
		return auth.Forbidden(fmt.Sprintf("key %s has scopes %q; the export of a user needs %s: it shows everything Pulse holds about them, the time they spent invisible included",
			p.Name, p.Scopes, auth.ScopeOperator))
	}
	// The export shows what users hide from other readers, as operator answers do
	// (auth.Views): no cache may keep it, whether or not view=operator was asked.
	c.Response().Header().Set(echo.HeaderCacheControl, "private, no-store")
	id, err := userIDParam(c)
	if err != nil {
		return err
	}
	q := c.QueryParams()
	if err := checkParams(q, "limit", "cursor", "view"); err != nil {
		return err
	}
	if v := q.Get("view"); v != "" && v != auth.ViewOperator {
		return httpserver.BadRequest("view", "the export is the operator view alone: leave view out, or ask view=operator")
	}
	limit := maxHistoryLimit
	if q.Get("limit") != "" {
		if limit, err = parseLimit(q); err != nil {
			return err
		}
	}
	var cur *exportCursor
	if s := q.Get("cursor"); s != "" {
		raw, err := h.cursors.Open(s)
		var ec exportCursor
		if err == nil {
			ec, err = decodeExportCursor(raw)
		}
		if err != nil || ec.User != exportUser(id) {
			return httpserver.BadRequest("cursor", badExportCursor)
		}
		cur, rec.next = &ec, true
	}

	// The range: from the UTC midnight the retention reaches back to, to a day past
	// the first page's instant.
	exportedAt := h.now().UTC().Truncate(time.Microsecond)
	from := dayOf(exportedAt.Add(-h.exportRetention))
	var pos *timelineCursor
	if cur != nil {
		exportedAt, from, pos = cur.ExportedAt, cur.From, &cur.Pos
	}
	to := exportedAt.Add(exportAhead)
	walked := to
	if pos != nil {
		walked = pos.At.Add(time.Millisecond)
	}
	if err := h.limits.charge(c, exportCost(from, walked, cur == nil)); err != nil {
		return err
	}

	// Cassandra first: while it cannot answer, the export is a 503 before Redis is read.
	s, ctx, ls, done, err := h.historyReads(c, h.maxReadsPerRequest())
	if err != nil {
		return err
	}
	defer done()
	var current *historyapi.ExportCurrent
	if cur == nil {
		if current, err = h.exportCurrent(c, id); err != nil {
			return err
		}
	}
	timeline := timelinePage{UserID: id, From: from, To: to}
	var more bool
	if timeline.Entries, more, err = walkTimeline(ctx, s, ls, id, from, to, pos, limit); err != nil {
		return h.cassErr(err)
	}
	rec.entries = len(timeline.Entries)
	if more {
		next := h.cursors.Sign(exportCursor{ExportedAt: exportedAt, From: from, User: exportUser(id), Pos: nextTimelinePos(timeline.Entries)}.Encode())
		timeline.NextCursor = &next
	}
	if cur != nil {
		page := historyapi.ExportPage{UserID: id, ExportedAt: exportedAt}
		page.History.Timeline = timeline
		return httpserver.JSON(c, http.StatusOK, page)
	}

	out := historyapi.Export{UserID: id, ExportedAt: exportedAt, Current: current, History: historyapi.ExportHistory{Timeline: timeline}}
	if err := exportHistory(ctx, s, id, from, to, &out.History); err != nil {
		return h.cassErr(err)
	}
	if nothingHeld(&out) {
		return &httpserver.Error{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf(
			"Pulse holds nothing about user %q: no state in Redis, and no row in history from %s on (PULSE_QUERY_EXPORT_RETENTION)",
			id, from.Format(time.DateOnly))}
	}
	return httpserver.JSON(c, http.StatusOK, out)
}

// maxReadsPerRequest is the most read slots one request may take, which a lease
// caps anyway.
func (h *historyHandlers) maxReadsPerRequest() int {
	if h.limits == nil {
		return 1
	}
	return h.limits.cfg.HistoryReadsPerRequest
}

// exportCurrent is user id's state in Redis as an export gives it, nil for a user
// Redis holds nothing of. The state and the groups are each read under
// PULSE_QUERY_READ_TIMEOUT.
func (h *historyHandlers) exportCurrent(c echo.Context, id string) (*historyapi.ExportCurrent, error) {
	ctx, cancel := h.ctx(c)
	defer cancel()
	u, err := h.store.Get(ctx, id)
	if err != nil {
		return nil, h.readErr(err)
	}
	if u == nil {
		return nil, nil
	}
	n, err := h.store.Shards(ctx)
	if err != nil {
		return nil, h.readErr(err)
	}
	sh := shard.For(id, n)
	gctx, gcancel := h.ctx(c)
	defer gcancel()
	groups, err := h.store.UserGroups(gctx, sh, u.Index)
	if err != nil {
		return nil, h.readErr(err)
	}
	return exportCurrentOf(u, sh, groups), nil
}

// exportCurrentOf is u, of shard sh and member of groups, as an export gives it.
func exportCurrentOf(u *presence.User, sh int, groups []string) *historyapi.ExportCurrent {
	v := &historyapi.ExportCurrent{
		Status: viewStatus(u.Status, true), Invisible: u.Invisible,
		LastUpdated: timePtr(u.LastUpdated), LastActive: timePtr(u.LastActive), LastSeen: timePtr(u.LastSeen),
		Public: historyapi.ExportTimes{LastUpdated: timePtr(u.Public.LastUpdated), LastActive: timePtr(u.Public.LastActive),
			LastSeen: timePtr(u.Public.LastSeen)},
		Devices: []historyapi.ExportDevice{}, Custom: customjson.View(u.Custom), CustomSetAt: timePtr(u.CustomSetAt),
		Groups: groups, Shard: sh, Index: u.Index, LogOffset: u.Offset,
	}
	for _, d := range u.Devices {
		v.Devices = append(v.Devices, historyapi.ExportDevice{DeviceID: d.ID, Status: d.Status.String(), LastSeen: d.LastSeen,
			PublicLastSeen: timePtr(d.PublicLastSeen), Hidden: d.Hidden})
	}
	return v
}

// exportHistory fills the first page's sections besides the timeline: the user_status
// row, the sessions and days of [from, to), and the user_indexes row.
func exportHistory(ctx context.Context, s *historystore.Store, id string, from, to time.Time, out *historyapi.ExportHistory) error {
	row, found, err := s.UserStatus(ctx, id)
	if err != nil {
		return err
	}
	if found {
		out.Status = exportStatusOf(&row)
	}
	sessions, err := readSessions(ctx, s, id, from, to)
	if err != nil {
		return err
	}
	days, err := readUserDays(ctx, s, id, dayOf(from), dayOf(to))
	if err != nil {
		return err
	}
	out.Sessions, out.Daily = &sessions, &days
	sh, index, found, err := s.Locate(ctx, id)
	if err != nil {
		return err
	}
	if found {
		out.PointInTime = &historyapi.ExportIndex{Shard: sh, Index: index}
	}
	return nil
}

// exportStatusOf is a user_status row as an export gives it.
func exportStatusOf(r *historystore.StatusRow) *historyapi.ExportStatus {
	v := &historyapi.ExportStatus{LastUpdated: timePtr(r.LastUpdated), LastActive: timePtr(r.LastActive), LastSeen: timePtr(r.LastSeen),
		CustomSetAt: timePtr(r.CustomSetAt), Groups: r.Groups}
	if r.Status != "" {
		v.Status = &r.Status
	}
	if r.LastEventID != "" {
		v.LastEventID = &r.LastEventID
	}
	if !r.CustomSetAt.IsZero() {
		v.Custom = customjson.EventView(&r.Custom) // {} for a clear
	}
	if v.Groups == nil {
		v.Groups = []string{}
	}
	return v
}

// nothingHeld reports whether a first page found nothing of its user anywhere.
func nothingHeld(e *historyapi.Export) bool {
	h := &e.History
	return e.Current == nil && h.Status == nil && h.PointInTime == nil && len(h.Timeline.Entries) == 0 &&
		len(h.Sessions.Sessions) == 0 && len(h.Daily.Days) == 0
}
