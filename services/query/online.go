package main

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/pkg/httpserver"
	"github.com/pulse-presence/pulse/pkg/presence"
	"github.com/pulse-presence/pulse/pkg/statestore"
)

// Who is online. GET /v1/online walks the shards' bitmaps in (shard, index) order
// behind an opaque cursor; POST /v1/online/filter answers "which of these users are
// online" from the bitmaps and the id map alone, never reading a user's state.
//
// Why the walk visits every user online throughout it exactly once: a user's shard
// and bitmap index never change, every page starts where the previous one stopped
// (the cursor is the next (shard, index) to look at), and indexes only grow along
// the walk. Users who come and go meanwhile may or may not be listed.

const (
	defaultListLimit = 100
	maxListLimit     = 1000
	maxActiveWithin  = 24 * time.Hour
	// maxScan bounds the candidates one page with activeWithin examines; a page
	// may then hold fewer users than its limit while more follow.
	maxScan = 10_000
	// scanChunk is how many candidates' states one round trip reads.
	scanChunk = 1000
	// maxLoadShards bounds the shards whose bitmaps one round trip loads.
	maxLoadShards = 16

	maxFilterIDs = 10_000
	// filterMaxBody fits 10,000 ids of the longest length; PULSE_QUERY_MAX_BODY
	// raises it, never lowers it.
	filterMaxBody = 2 << 20
	// filterCacheTTL is how long the filter reuses a shard's bitmaps: much less than
	// a heartbeat, and it spares re-reading every shard's bitmaps per request.
	filterCacheTTL = 250 * time.Millisecond
)

// onlineHandlers serve the listing and the filter.
type onlineHandlers struct {
	*api
	cache *bitmapCache
	now   func() time.Time
}

// onlineRoutes registers who-is-online listing and the friends filter.
func (a *api) onlineRoutes(e *echo.Echo) {
	h := &onlineHandlers{api: a, cache: newBitmapCache(a.store, filterCacheTTL, time.Now), now: time.Now}
	e.GET("/v1/online", h.list)
	e.POST("/v1/online/filter", h.filter)
}

type onlineUser struct {
	UserID string `json:"userId"`
	Status string `json:"status"`
}

type onlineList struct {
	Users []onlineUser `json:"users"`
	// NextCursor is null once the walk is complete.
	NextCursor *string `json:"nextCursor"`
}

// position is where a walk goes on: the next index to look at in shard. shard == the
// shard count means the walk is complete.
type position struct {
	shard int
	from  uint32
}

// cursor is a position with the shard count it belongs to: the indexes of another
// shard count name other users.
type cursor struct {
	shards int
	pos    position
}

const cursorVersion = 1

// encode writes c as base64url of: version | shard count | shard | next index
// (uvarints) | crc-32 of what precedes it, so a mangled cursor is refused rather than
// read as another position.
func (c cursor) encode() string {
	b := []byte{cursorVersion}
	b = binary.AppendUvarint(b, uint64(c.shards))
	b = binary.AppendUvarint(b, uint64(c.pos.shard))
	b = binary.AppendUvarint(b, uint64(c.pos.from))
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return base64.RawURLEncoding.EncodeToString(b)
}

var errBadCursor = errors.New("is not a cursor this API returned; send the nextCursor of the previous page, or none")

func decodeCursor(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 1+3+4 || b[0] != cursorVersion {
		return cursor{}, errBadCursor
	}
	body, sum := b[:len(b)-4], b[len(b)-4:]
	if crc32.ChecksumIEEE(body) != binary.BigEndian.Uint32(sum) {
		return cursor{}, errBadCursor
	}
	body = body[1:]
	var v [3]uint64
	for i := range v {
		x, n := binary.Uvarint(body)
		if n <= 0 {
			return cursor{}, errBadCursor
		}
		v[i], body = x, body[n:]
	}
	if len(body) != 0 || v[0] == 0 || v[0] > math.MaxInt32 || v[1] >= v[0] || v[2] > math.MaxUint32 {
		return cursor{}, errBadCursor
	}
	return cursor{shards: int(v[0]), pos: position{shard: int(v[1]), from: uint32(v[2])}}, nil
}

// listQuery is a checked GET /v1/online request.
type listQuery struct {
	// statuses to list, in Tracked order.
	statuses     []presence.Status
	limit        int
	cursor       *cursor
	activeWithin time.Duration
}

// parseListQuery checks the query parameters; operator says whether the request has
// the operator view, the only one that lists invisible users.
func parseListQuery(q url.Values, operator bool) (listQuery, error) {
	lq := listQuery{limit: defaultListLimit}
	for name := range q {
		switch name {
		case "status", "limit", "cursor", "activeWithin", "view":
		default:
			return lq, httpserver.BadRequest(name, "unknown parameter; want status, limit, cursor, activeWithin or view")
		}
	}
	switch s := q.Get("status"); s {
	case "":
		lq.statuses = []presence.Status{presence.Online, presence.Idle}
		if operator {
			lq.statuses = append(lq.statuses, presence.Invisible)
		}
	case "online", "idle":
		st, _ := presence.ParseStatus(s)
		lq.statuses = []presence.Status{st}
	case "invisible":
		if !operator {
			return lq, httpserver.BadRequest("status", "invisible users are listed only in the operator view (view=operator)")
		}
		lq.statuses = []presence.Status{presence.Invisible}
	default:
		want := "online or idle"
		if operator {
			want = "online, idle or invisible"
		}
		return lq, httpserver.BadRequest("status", fmt.Sprintf("must be %s, got %q", want, s))
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxListLimit {
			return lq, httpserver.BadRequest("limit", fmt.Sprintf("must be an integer from 1 to %d, got %q", maxListLimit, s))
		}
		lq.limit = n
	}
	if s := q.Get("cursor"); s != "" {
		c, err := decodeCursor(s)
		if err != nil {
			return lq, httpserver.BadRequest("cursor", err.Error())
		}
		lq.cursor = &c
	}
	if s := q.Get("activeWithin"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > maxActiveWithin {
			return lq, httpserver.BadRequest("activeWithin", fmt.Sprintf("must be a duration such as 15m, above 0 and at most %v, got %q", maxActiveWithin, s))
		}
		lq.activeWithin = d
	}
	return lq, nil
}

func (h *onlineHandlers) list(c echo.Context) error {
	operator := httpserver.OperatorView(c)
	q, err := parseListQuery(c.QueryParams(), operator)
	if err != nil {
		return err
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	n, err := h.store.Shards(ctx)
	if err != nil {
		return h.readErr(err)
	}
	if n == 0 {
		return c.JSON(http.StatusOK, onlineList{Users: []onlineUser{}})
	}
	var pos position
	if q.cursor != nil {
		if q.cursor.shards != n {
			return httpserver.BadRequest("cursor", fmt.Sprintf("belongs to a state of %d shards, which now has %d; start the walk again", q.cursor.shards, n))
		}
		pos = q.cursor.pos
	}
	w := walk{store: h.store, n: n, q: q}
	if q.activeWithin > 0 {
		w.cutoff = h.now().Add(-q.activeWithin)
	}
	users, next, err := w.page(ctx, pos)
	if err != nil {
		return h.readErr(err)
	}
	res := onlineList{Users: users}
	if next.shard < n {
		s := cursor{shards: n, pos: next}.encode()
		res.NextCursor = &s
	}
	return c.JSON(http.StatusOK, res)
}

// candidate is a user a bitmap lists, with where the walk goes on after it.
type candidate struct {
	shard  int
	index  uint32
	status presence.Status
	after  position
}

// walk makes one page of a listing.
type walk struct {
	store  *statestore.Store
	n      int
	q      listQuery
	cutoff time.Time // zero: no activeWithin
	counts []statestore.Counts
}

// count is how many users shard sh holds in the listed statuses.
func (w *walk) count(sh int) uint64 {
	var c uint64
	for _, st := range w.q.statuses {
		c += w.counts[sh].Of(st)
	}
	return c
}

// skipEmpty moves p past the shards that hold nobody to list. A count is written
// atomically with its bitmap, so a shard counted empty held nobody at that instant,
// and anyone online during the whole walk was in it then.
func (w *walk) skipEmpty(p position) position {
	for p.shard < w.n && w.count(p.shard) == 0 {
		p = position{shard: p.shard + 1}
	}
	return p
}

// page lists up to the limit's users from pos on, and where the next page starts.
func (w *walk) page(ctx context.Context, pos position) ([]onlineUser, position, error) {
	var err error
	if w.counts, err = w.store.ShardCounts(ctx, w.n); err != nil {
		return nil, pos, err
	}
	out := make([]onlineUser, 0, min(w.q.limit, 128))
	scanned := 0
	for pos = w.skipEmpty(pos); pos.shard < w.n && len(out) < w.q.limit; pos = w.skipEmpty(pos) {
		want := w.q.limit - len(out)
		if !w.cutoff.IsZero() {
			if scanned >= maxScan {
				break
			}
			want = min(scanChunk, maxScan-scanned)
		}
		// Load the shards that, by their counts, hold the users wanted.
		var shards []int
		var sum uint64
		for sh := pos.shard; sh < w.n && len(shards) < maxLoadShards && sum < uint64(want); sh++ {
			if c := w.count(sh); c > 0 {
				shards, sum = append(shards, sh), sum+c
			}
		}
		bms, err := w.store.LoadBitmaps(ctx, shards, w.q.statuses)
		if err != nil {
			return nil, pos, err
		}
		cands, next := collect(shards, bms, pos, want)
		scanned += len(cands)
		users, took, err := w.resolve(ctx, cands, w.q.limit-len(out))
		if err != nil {
			return nil, pos, err
		}
		out = append(out, users...)
		if took < len(cands) {
			next = cands[took-1].after
		}
		pos = next
	}
	return out, pos, nil
}

// collect takes, in (shard, index) order, up to want users from the bitmaps of
// shards (ascending, all at or after pos.shard), starting at pos. It returns them and
// where the walk goes on.
func collect(shards []int, bms []statestore.ShardBitmaps, pos position, want int) ([]candidate, position) {
	var out []candidate
	for k, sh := range shards {
		var from uint32
		if sh == pos.shard {
			from = pos.from
		}
		it := newMerged(&bms[k], from)
		for it.hasNext() {
			idx, st := it.next()
			c := candidate{shard: sh, index: idx, status: st, after: position{shard: sh + 1}}
			if it.hasNext() && idx < math.MaxUint32 {
				c.after = position{shard: sh, from: idx + 1}
			}
			out = append(out, c)
			if len(out) == want {
				return out, c.after
			}
		}
	}
	if len(shards) == 0 {
		return out, pos
	}
	return out, position{shard: shards[len(shards)-1] + 1}
}

// merged iterates the indexes of a shard's loaded bitmaps in order, with the status
// of the bitmap each comes from (they are disjoint: a user has one status).
type merged struct {
	its [len(statestore.Tracked)]roaring.IntPeekable
}

func newMerged(b *statestore.ShardBitmaps, from uint32) *merged {
	m := &merged{}
	for i, bm := range b {
		if bm != nil {
			m.its[i] = bm.Iterator()
			m.its[i].AdvanceIfNeeded(from)
		}
	}
	return m
}

func (m *merged) hasNext() bool {
	for _, it := range m.its {
		if it != nil && it.HasNext() {
			return true
		}
	}
	return false
}

// next is the smallest index left; call only when hasNext.
func (m *merged) next() (uint32, presence.Status) {
	best := -1
	for i, it := range m.its {
		if it != nil && it.HasNext() && (best < 0 || it.PeekNext() < m.its[best].PeekNext()) {
			best = i
		}
	}
	idx := m.its[best].Next()
	// Should two bitmaps ever share an index, list it once.
	for i, it := range m.its {
		if i != best && it != nil && it.HasNext() && it.PeekNext() == idx {
			it.Next()
		}
	}
	return idx, statestore.Tracked[best]
}

// resolve turns candidates into users: their ids in one round trip, and with
// activeWithin their states in another, keeping those active since the cutoff. It
// returns at most room users, and how many candidates they used up.
func (w *walk) resolve(ctx context.Context, cands []candidate, room int) ([]onlineUser, int, error) {
	batches := groupByShard(cands, func(c candidate) int { return c.shard })
	idx := make([]statestore.ShardIndexes, len(batches))
	for k, b := range batches {
		idx[k].Shard = cands[b.start].shard
		for _, c := range cands[b.start:b.end] {
			idx[k].Indexes = append(idx[k].Indexes, c.index)
		}
	}
	ids, err := w.store.UserIDs(ctx, idx)
	if err != nil {
		return nil, 0, err
	}
	var states [][]*presence.User
	if !w.cutoff.IsZero() {
		users := make([]statestore.ShardUsers, len(batches))
		for k := range batches {
			users[k] = statestore.ShardUsers{Shard: idx[k].Shard, IDs: ids[k]}
		}
		if states, err = w.store.LoadUserStates(ctx, users); err != nil {
			return nil, 0, err
		}
	}
	out := make([]onlineUser, 0, min(room, len(cands)))
	for k, b := range batches {
		for j := range b.end - b.start {
			id, c := ids[k][j], cands[b.start+j]
			if id == "" {
				continue
			}
			st := c.status
			if states != nil {
				u := states[k][j]
				// The state may be a moment newer than the bitmaps; it decides.
				if u == nil || u.LastActive.Before(w.cutoff) || !w.listed(u.Status) {
					continue
				}
				st = u.Status
			}
			out = append(out, onlineUser{UserID: id, Status: st.String()})
			if len(out) == room {
				return out, b.start + j + 1, nil
			}
		}
	}
	return out, len(cands), nil
}

func (w *walk) listed(st presence.Status) bool {
	for _, s := range w.q.statuses {
		if s == st {
			return true
		}
	}
	return false
}

// span is a run [start, end) of a slice.
type span struct{ start, end int }

// groupByShard splits xs, ordered by shard, into runs of one shard each.
func groupByShard[T any](xs []T, shardOf func(T) int) []span {
	var out []span
	for i := range xs {
		if i == 0 || shardOf(xs[i]) != shardOf(xs[i-1]) {
			out = append(out, span{start: i, end: i + 1})
		} else {
			out[len(out)-1].end = i + 1
		}
	}
	return out
}

type filterRequest struct {
	UserIDs []string `json:"userIds"`
}

type filterResponse struct {
	Online []onlineUser `json:"online"`
}

// filter answers which of the given users are online or idle (and, in the operator
// view, invisible), in request order.
func (h *onlineHandlers) filter(c echo.Context) error {
	body, err := httpserver.ReadBody(c, max(h.maxBody, filterMaxBody))
	if err != nil {
		return err
	}
	var req filterRequest
	if err := httpserver.DecodeObject(body, &req, ""); err != nil {
		return err
	}
	if req.UserIDs == nil {
		return httpserver.BadRequest("userIds", "is required")
	}
	if len(req.UserIDs) > maxFilterIDs {
		return httpserver.BadRequest("userIds", fmt.Sprintf("at most %d user ids per request, got %d", maxFilterIDs, len(req.UserIDs)))
	}
	for i, id := range req.UserIDs {
		if err := presence.ValidateID(id, presence.MaxUserIDLen); err != nil {
			return httpserver.BadRequest(fmt.Sprintf("userIds[%d]", i), err.Error())
		}
	}
	visible := [len(statestore.Tracked)]bool{}
	visible[statestore.TrackedPos(presence.Online)] = true
	visible[statestore.TrackedPos(presence.Idle)] = true
	visible[statestore.TrackedPos(presence.Invisible)] = httpserver.OperatorView(c)

	ctx, cancel := h.ctx(c)
	defer cancel()
	res := filterResponse{Online: []onlineUser{}}
	n, err := h.store.Shards(ctx)
	if err != nil {
		return h.readErr(err)
	}
	if n == 0 || len(req.UserIDs) == 0 {
		return c.JSON(http.StatusOK, res)
	}
	locs, err := h.store.Locate(ctx, n, req.UserIDs)
	if err != nil {
		return h.readErr(err)
	}
	seen := make([]bool, n)
	var shards []int
	for _, l := range locs {
		if l.Known && !seen[l.Shard] {
			seen[l.Shard] = true
			shards = append(shards, l.Shard)
		}
	}
	bms, err := h.cache.get(ctx, shards)
	if err != nil {
		return h.readErr(err)
	}
	for i, l := range locs {
		if !l.Known {
			continue
		}
		if st, ok := bms[l.Shard].StatusOf(l.Index); ok && visible[statestore.TrackedPos(st)] {
			res.Online = append(res.Online, onlineUser{UserID: req.UserIDs[i], Status: st.String()})
		}
	}
	return c.JSON(http.StatusOK, res)
}

// bitmapCache keeps shards' bitmaps for the filter a short while: a burst of friends
// lists then costs one load of each shard's bitmaps instead of one per request.
type bitmapCache struct {
	store *statestore.Store
	ttl   time.Duration
	now   func() time.Time

	mu      sync.Mutex
	entries map[int]cachedBitmaps
}

type cachedBitmaps struct {
	bms *statestore.ShardBitmaps
	at  time.Time
}

func newBitmapCache(store *statestore.Store, ttl time.Duration, now func() time.Time) *bitmapCache {
	return &bitmapCache{store: store, ttl: ttl, now: now, entries: make(map[int]cachedBitmaps)}
}

// get returns every tracked bitmap of shards, loading those not fresh in one round
// trip. The bitmaps returned are shared: read them, never change them.
func (bc *bitmapCache) get(ctx context.Context, shards []int) (map[int]*statestore.ShardBitmaps, error) {
	out := make(map[int]*statestore.ShardBitmaps, len(shards))
	now := bc.now()
	var missing []int
	bc.mu.Lock()
	for _, sh := range shards {
		if e, ok := bc.entries[sh]; ok && now.Sub(e.at) < bc.ttl {
			out[sh] = e.bms
		} else {
			missing = append(missing, sh)
		}
	}
	bc.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	loaded, err := bc.store.LoadBitmaps(ctx, missing, statestore.Tracked[:])
	if err != nil {
		return nil, err
	}
	bc.mu.Lock()
	defer bc.mu.Unlock()
	for k, sh := range missing {
		out[sh] = &loaded[k]
		if e, ok := bc.entries[sh]; !ok || e.at.Before(now) {
			bc.entries[sh] = cachedBitmaps{bms: &loaded[k], at: now}
		}
	}
	return out, nil
}
