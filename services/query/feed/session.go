package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/time/rate"

	"github.com/pulse-presence/pulse/internal/api/customjson"
	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// Message types.
const (
	TypeSnapshot = "snapshot"
	TypeChange   = "change"
	// TypeMember is a membership change, sent to a group's watchers: a user joined or
	// left the group.
	TypeMember = "member"
	TypeError  = "error"
	// TypeAck answers a command the transport carried out itself (a present
	// socket's status or activity) once it is done.
	TypeAck = "ack"
)

// Error codes of error messages; the connection stays open after them.
const (
	// CodeCursorExpired: the cursor's changes are no longer all in the log (or the
	// cursor belongs to another log). A fresh snapshot follows.
	CodeCursorExpired = "cursor_expired"
	// CodeInvalidCommand: a command could not be understood; it was ignored.
	CodeInvalidCommand = "invalid_command"
	// CodeTooManyUsers: a subscribe would exceed the per-connection limit; ignored.
	CodeTooManyUsers = "too_many_users"
	// CodeForbidden: a subscribe named a user the connection's credential may not
	// watch; ignored.
	CodeForbidden = "forbidden"
	// CodeRateLimited: the client sent commands faster than its connection's rate
	// (Config.CommandRate); the command was ignored.
	CodeRateLimited = "rate_limited"
)

// Message is one message for the client, already JSON.
type Message struct {
	Type string
	// Cursor is the position after this message; "" for errors.
	Cursor string
	Data   []byte

	at   time.Time // a change's changed_at
	live bool      // from the hub's fan-out, not a replay
	code string    // an error's code
}

// Options are what a connection asks for.
type Options struct {
	// UserIDs are the users to watch (validated, at most Config.MaxUsers); a
	// WebSocket client may start with none and subscribe later.
	UserIDs []string
	// Firehose watches every user; it excludes UserIDs. Operators only: the caller
	// checks.
	Firehose bool
	// Group watches the members of a group besides UserIDs (docs/design.md,
	// "Groups"): the snapshot lists them, and their changes and the group's
	// membership changes follow. The caller checks the reader may read the group.
	Group string
	// Operator shows statuses as they are (invisible stays invisible); otherwise
	// invisible reads as offline and changes between the two are not sent.
	Operator bool
	// Cursor, when set, resumes after it instead of starting with a snapshot.
	Cursor *Cursor
	// Principal names the credential (a key's name, a user token's user): its
	// resumes share Config.MaxLogReplaysPerPrincipal replay slots.
	Principal string
}

type phase int

const (
	phaseFresh  phase = iota // to attach with a snapshot first
	phaseResume              // resuming from a cursor: Session.resume
	phaseLive                // taking the hub's queue
)

// Session is one connection's subscription. Next, Sent and Close belong to one
// goroutine (the connection's writer); Subscribe, Unsubscribe and Reject may be
// called from any other.
type Session struct {
	h        *Hub
	sub      *subscriber
	operator bool
	firehose bool
	group    string
	initial  []string

	// wanted are the ids subscribed to, as commands left them; users those whose
	// snapshot was sent (or who came with a cursor): the changes delivered.
	wanted map[string]struct{}
	users  map[string]struct{}
	// floors hold, per user, the highest source offset delivered or reflected in a
	// snapshot: nothing at or below it is sent again.
	floors map[string]int64

	phase   phase
	pending []outgoing
	cmds    chan command
	snap    *snapMarker // a snapshot taken from the queue, not yet sent

	// resume is the way back to the cursor the session was opened with; nil for a
	// session that starts with a snapshot, and once the resume is done.
	resume *resume
	// commands is the connection's command bucket (Config.CommandRate); nil: no bound.
	commands *rate.Limiter

	closed bool
}

type outgoing struct {
	e      *entry
	cursor string // overrides the hub's cursor of e
	live   bool
	msg    *Message
}

type commandKind int

const (
	cmdSubscribe commandKind = iota
	cmdUnsubscribe
	cmdReject
	cmdReply
)

type command struct {
	kind    commandKind
	ids     []string
	code    string
	message string
	reply   *Message
}

// Open starts a session. It fails with ErrNotReady before the hub has found the end
// of the log, ErrGoingAway while it shuts down, and ErrInvalid for options that
// cannot be served. A cursor the hub's memory no longer reaches back to needs a log
// replay: Open waits for a replay slot (Config.ReplayWait at most, or until ctx
// ends) and fails with ErrReplaysBusy or ErrPrincipalReplaysBusy when none frees up,
// so that a transport can refuse the connection before it starts.
func (h *Hub) Open(ctx context.Context, o Options) (*Session, error) {
	if o.Firehose && (len(o.UserIDs) > 0 || o.Group != "") {
		return nil, fmt.Errorf("%w: firehose takes no user ids and no group", ErrInvalid)
	}
	ids := dedupe(o.UserIDs)
	if len(ids) > h.cfg.MaxUsers {
		return nil, fmt.Errorf("%w: at most %d user ids per connection, got %d", ErrInvalid, h.cfg.MaxUsers, len(ids))
	}
	sctx, cancel := context.WithCancelCause(context.Background())
	sub := &subscriber{
		q: newQueue(h.cfg.QueueSize), ctx: sctx, cancel: cancel,
		operator: o.Operator, firehose: o.Firehose, group: o.Group, users: make(map[string]int),
	}
	h.mu.Lock()
	switch {
	case h.closing:
		h.mu.Unlock()
		cancel(ErrGoingAway)
		return nil, ErrGoingAway
	case !h.ready:
		h.mu.Unlock()
		cancel(ErrNotReady)
		return nil, ErrNotReady
	}
	h.open[sub] = struct{}{}
	h.mu.Unlock()
	h.m.subscribers.WithLabelValues(kind(o.Firehose)).Inc()
	s := &Session{
		h: h, sub: sub, operator: o.Operator, firehose: o.Firehose, group: o.Group, initial: ids,
		wanted: make(map[string]struct{}, len(ids)), users: make(map[string]struct{}, len(ids)),
		floors: make(map[string]int64), cmds: make(chan command, 16),
	}
	for _, id := range ids {
		s.wanted[id] = struct{}{}
	}
	if h.cfg.CommandRate > 0 {
		s.commands = rate.NewLimiter(rate.Limit(h.cfg.CommandRate), h.cfg.CommandBurst)
	}
	if o.Cursor != nil {
		// A resumed client has every change of its users up to the cursor: they are
		// delivered from the start, no snapshot first.
		for _, id := range ids {
			s.users[id] = struct{}{}
		}
		s.phase = phaseResume
		s.resume = &resume{h: h, sub: sub, ids: ids, watches: s.watches, from: *o.Cursor, principal: o.Principal}
		if h.needsLog(*o.Cursor) {
			if err := s.resume.acquire(ctx); err != nil {
				s.Close()
				return nil, err
			}
		}
	}
	return s, nil
}

// AdmitCommand takes a token of the connection's command bucket for one command;
// false when the client sends faster than Config.CommandRate allows, and the command
// must be ignored. For the transport's reading goroutine.
func (s *Session) AdmitCommand() bool {
	return s.commands == nil || s.commands.Allow()
}

func kind(firehose bool) string {
	if firehose {
		return "firehose"
	}
	return "users"
}

func dedupe(ids []string) []string {
	seen := make(map[string]struct{}, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if _, ok := seen[id]; !ok {
			seen[id] = struct{}{}
			out = append(out, id)
		}
	}
	return out
}

// Close ends the session; safe to call more than once.
func (s *Session) Close() {
	if s.closed {
		return
	}
	s.closed = true
	s.endResume()
	h := s.h
	h.subMu.Lock()
	h.unregisterLocked(s.sub)
	s.sub.dropped.Store(true)
	h.subMu.Unlock()
	h.mu.Lock()
	delete(h.open, s.sub)
	h.checkDrainedLocked()
	h.mu.Unlock()
	s.sub.cancel(errClosed)
	h.m.subscribers.WithLabelValues(kind(s.firehose)).Dec()
}

var errClosed = errors.New("session closed")

// Subscribe asks to watch ids as well; a snapshot of them follows.
func (s *Session) Subscribe(ids []string) error {
	return s.command(command{kind: cmdSubscribe, ids: ids})
}

// Unsubscribe asks to stop watching ids.
func (s *Session) Unsubscribe(ids []string) error {
	return s.command(command{kind: cmdUnsubscribe, ids: ids})
}

// Reject sends the client an error message (code, message) in order with the rest;
// for commands the transport could not decode.
func (s *Session) Reject(code, message string) error {
	return s.command(command{kind: cmdReject, code: code, message: message})
}

// Reply sends the client m in order with the rest; for the answers of commands the
// transport carried out itself.
func (s *Session) Reply(m Message) error {
	return s.command(command{kind: cmdReply, reply: &m})
}

func (s *Session) command(c command) error {
	select {
	case s.cmds <- c:
		return nil
	default:
		return ErrCommandBacklog
	}
}

// Sent records that m was written to the client.
func (s *Session) Sent(m Message) {
	s.h.m.delivered.WithLabelValues(m.Type).Inc()
	if m.Type == TypeError {
		s.h.m.errors.WithLabelValues(m.code).Inc()
	}
	if m.live && m.Type == TypeChange {
		s.h.m.delay.Observe(time.Since(m.at).Seconds())
	}
}

// WriteTimedOut records that a write to the client did not finish in time: the
// transport closes the connection, a slow consumer too.
func (s *Session) WriteTimedOut() { s.h.m.slow.Inc() }

// Next waits for the next message. It returns ErrSlowConsumer, ErrGoingAway or an
// ErrUnavailable when the session is over, or ctx's error.
func (s *Session) Next(ctx context.Context) (Message, error) {
	for {
		if err := context.Cause(s.sub.ctx); err != nil {
			return Message{}, err
		}
		if err := ctx.Err(); err != nil {
			return Message{}, err
		}
		if len(s.pending) > 0 {
			o := s.pending[0]
			s.pending[0] = outgoing{}
			s.pending = s.pending[1:]
			if m, ok := s.emit(o); ok {
				return m, nil
			}
			continue
		}
		var err error
		switch s.phase {
		case phaseFresh:
			err = s.fresh()
		case phaseResume:
			err = s.resumeStep(ctx)
		case phaseLive:
			var m Message
			var ok bool
			m, ok, err = s.live(ctx)
			if ok {
				return m, nil
			}
		}
		if err != nil {
			if c := context.Cause(s.sub.ctx); c != nil {
				return Message{}, c
			}
			if ctx.Err() != nil {
				// The caller gave up; the session stays as it was, and a later call
				// carries on where this one stopped.
				return Message{}, ctx.Err()
			}
			return Message{}, err
		}
	}
}

// fresh registers live with a snapshot first.
func (s *Session) fresh() error {
	s.endResume()
	clear(s.users)
	s.phase = phaseLive
	return s.h.attachFresh(s.sub, s.initial)
}

// expire tells the client its cursor cannot be served, and starts afresh.
func (s *Session) expire(why string) error {
	s.h.m.resumes.WithLabelValues("expired").Inc()
	s.pending = append(s.pending, outgoing{msg: errorMessage(CodeCursorExpired, why+"; a fresh snapshot follows")})
	return s.fresh()
}

// resumeStep takes the resume one step further, and the session live once it is
// done, or afresh when the cursor cannot be served.
func (s *Session) resumeStep(ctx context.Context) error {
	res, err := s.resume.step(ctx)
	if err != nil {
		return err
	}
	s.pending = append(s.pending, res.out...)
	switch {
	case res.expired != "":
		return s.expire(res.expired)
	case res.live:
		s.endResume()
		s.phase = phaseLive
	}
	return nil
}

// endResume lets go of the resume's log and replay slot, if it has any.
func (s *Session) endResume() {
	if s.resume != nil {
		s.resume.release()
		s.resume = nil
	}
}

// watches reports whether the session delivers e: the changes of its users (every
// user's for the firehose), and for a group's watcher its members' changes and the
// group's membership changes.
func (s *Session) watches(e *entry) bool {
	if e.group != "" {
		return s.group != "" && e.group == s.group
	}
	if s.firehose {
		return true
	}
	if _, ok := s.users[e.userID]; ok {
		return true
	}
	return s.group != "" && slices.Contains(e.groups, s.group)
}

// live takes the next item of the queue, or a command.
func (s *Session) live(ctx context.Context) (Message, bool, error) {
	select {
	case c := <-s.cmds:
		return Message{}, false, s.handle(c)
	default:
	}
	if s.snap != nil {
		m, err := s.snapshot(ctx, s.snap)
		if err != nil {
			return Message{}, false, err
		}
		s.snap = nil
		return m, true, nil
	}
	if it, ok := s.sub.q.pop(); ok {
		if it.snap != nil {
			s.snap = it.snap // taken on the next pass, and again if the read fails
			return Message{}, false, nil
		}
		m, ok := s.emit(outgoing{e: it.e, live: true})
		return m, ok, nil
	}
	select {
	case <-s.sub.q.ready:
		return Message{}, false, nil
	case c := <-s.cmds:
		return Message{}, false, s.handle(c)
	case <-s.sub.ctx.Done():
		return Message{}, false, context.Cause(s.sub.ctx)
	case <-ctx.Done():
		return Message{}, false, ctx.Err()
	}
}

// emit turns a change into its message, unless the session does not send it.
func (s *Session) emit(o outgoing) (Message, bool) {
	if o.msg != nil {
		return *o.msg, true
	}
	e := o.e
	if !s.watches(e) {
		return Message{}, false
	}
	if !s.firehose {
		if f, ok := s.floors[e.userID]; ok && e.sourceOffset <= f {
			return Message{}, false // already sent, or reflected in the snapshot
		}
		s.floors[e.userID] = e.sourceOffset
	}
	if !s.operator && e.publicNoop() {
		return Message{}, false
	}
	m := Message{Type: TypeChange, at: e.at, live: o.live}
	if e.group != "" {
		m.Type = TypeMember
	}
	if o.cursor != "" {
		m.Cursor, m.Data = o.cursor, e.message(s.operator, o.cursor, time.Now())
	} else {
		m.Cursor, m.Data = e.cursor, e.payload(s.operator)
	}
	return m, true
}

func (s *Session) handle(c command) error {
	switch c.kind {
	case cmdReject:
		s.pending = append(s.pending, outgoing{msg: errorMessage(c.code, c.message)})
	case cmdReply:
		s.pending = append(s.pending, outgoing{msg: c.reply})
	case cmdSubscribe:
		if s.firehose {
			s.pending = append(s.pending, outgoing{msg: errorMessage(CodeInvalidCommand, "a firehose connection watches every user already")})
			return nil
		}
		ids := dedupe(c.ids)
		var add []string
		for _, id := range ids {
			if _, ok := s.wanted[id]; !ok {
				add = append(add, id)
			}
		}
		if len(s.wanted)+len(add) > s.h.cfg.MaxUsers {
			s.pending = append(s.pending, outgoing{msg: errorMessage(CodeTooManyUsers,
				fmt.Sprintf("a connection watches at most %d users; it watches %d and asked for %d more", s.h.cfg.MaxUsers, len(s.wanted), len(add)))})
			return nil
		}
		for _, id := range add {
			s.wanted[id] = struct{}{}
		}
		s.h.subscribe(s.sub, add)
	case cmdUnsubscribe:
		if s.firehose {
			s.pending = append(s.pending, outgoing{msg: errorMessage(CodeInvalidCommand, "a firehose connection cannot unsubscribe users")})
			return nil
		}
		for _, id := range c.ids {
			delete(s.wanted, id)
			delete(s.users, id)
			delete(s.floors, id)
		}
		s.h.unsubscribe(s.sub, c.ids)
	}
	return nil
}

// Status is one user's status in a snapshot: the full status of POST /v1/statuses.
type Status struct {
	UserID      string     `json:"userId"`
	Status      string     `json:"status"`
	LastUpdated *time.Time `json:"lastUpdated"`
	LastActive  *time.Time `json:"lastActive"`
	LastSeen    *time.Time `json:"lastSeen"`
	// Data is the user's custom status as the reader may see it (null: none).
	Data *customjson.Out `json:"data"`
}

// timePtr is t, or nil for the zero time (never seen).
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

type snapshotMessage struct {
	Type     string   `json:"type"`
	Statuses []Status `json:"statuses"`
	// Group and Members, for a group's watcher's first snapshot: the group and its
	// members then, whose statuses Statuses holds with those of the users watched.
	Group   string   `json:"groupId,omitempty"`
	Members []string `json:"members,omitempty"`
	Cursor  string   `json:"cursor"`
}

// snapshot reads the current state of the marker's ids. Their changes queued after
// the marker that the state already reflects (the aggregator writes Redis before it
// produces the changes) are dropped by the floors set here.
func (s *Session) snapshot(ctx context.Context, mk *snapMarker) (Message, error) {
	cursor := s.h.cursor(mk.at)
	out := snapshotMessage{Type: TypeSnapshot, Statuses: []Status{}, Cursor: cursor}
	var ids []string
	for _, id := range mk.ids {
		if _, ok := s.wanted[id]; ok {
			ids = append(ids, id)
		}
	}
	// A group's members: their statuses are listed, and their floors set, but they
	// are not users of the session: their changes come as the group's.
	var members []string
	if mk.group != "" {
		rctx, cancel := context.WithTimeout(ctx, s.h.cfg.SnapshotTimeout)
		m, err := s.h.state.GroupMembers(rctx, mk.group, s.h.cfg.MaxUsers)
		cancel()
		if errors.Is(err, ErrGroupTooLarge) {
			return Message{}, err
		}
		if err != nil {
			return Message{}, fmt.Errorf("%w: reading the group's members: %w", ErrUnavailable, err)
		}
		out.Group, out.Members = mk.group, m
		if out.Members == nil {
			out.Members = []string{}
		}
		members = m
	}
	watched := len(ids)
	for _, id := range members {
		if _, ok := s.wanted[id]; !ok {
			ids = append(ids, id)
		}
	}
	if len(ids) > 0 {
		rctx, cancel := context.WithTimeout(ctx, s.h.cfg.SnapshotTimeout)
		states, err := s.h.state.GetMany(rctx, ids)
		cancel()
		if err != nil {
			return Message{}, fmt.Errorf("%w: reading the snapshot: %w", ErrUnavailable, err)
		}
		now := time.Now()
		for i, id := range ids {
			if i < watched {
				s.users[id] = struct{}{}
			}
			st := Status{UserID: id, Status: presence.Offline.String()}
			if u := states[i]; u != nil {
				st.Status = viewStatus(u.Status, s.operator)
				t := u.TimesFor(s.operator)
				st.LastUpdated, st.LastActive, st.LastSeen = timePtr(t.LastUpdated), timePtr(t.LastActive), timePtr(t.LastSeen)
				if s.operator {
					st.Data = customjson.View(u.CustomAt(now))
				} else {
					st.Data = customjson.View(u.PublicCustomAt(now))
				}
				if f, ok := s.floors[id]; !ok || u.Offset > f {
					s.floors[id] = u.Offset
				}
			}
			out.Statuses = append(out.Statuses, st)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return Message{}, fmt.Errorf("encoding snapshot: %w", err)
	}
	return Message{Type: TypeSnapshot, Cursor: cursor, Data: b}, nil
}

func viewStatus(st presence.Status, operator bool) string {
	if operator && st != presence.StatusUnknown {
		return st.String()
	}
	return st.Public().String()
}

type errorBody struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ErrorMessage is an error message with code and message, as the session sends
// them; transports use it for the reason they end a connection with.
func ErrorMessage(code, message string) Message {
	b, _ := json.Marshal(errorBody{Type: TypeError, Code: code, Message: message})
	return Message{Type: TypeError, Data: b, code: code}
}

func errorMessage(code, message string) *Message {
	m := ErrorMessage(code, message)
	return &m
}
