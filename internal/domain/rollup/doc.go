// Package rollup folds one shard's effective status changes (presence.changes, one
// partition) into the rows that answer the analysts' questions of docs/design.md
// (History): sessions per user (Q2), totals per user and UTC day (Q3), concurrency per
// shard and minute (Q4) and unique users per shard and hour (Q6). It is pure: no I/O and
// no clock. The history service feeds it changes in log order, advances its watermark,
// writes the rows it hands out and checkpoints its state; everything it returns is a
// function of that sequence of calls alone, so a replay writes the same rows again.
//
// # Time
//
// Every time is UTC with microsecond precision, the unit of the log. A change takes
// effect at its changed_at: a user's status at instant t is the one set by their latest
// change at or before t, and offline before their first. Time is divided into spans
// [from, to) between consecutive changes of a user. A user is "present" at an instant
// when their status then is online, idle or invisible (not offline).
//
// # Sessions (Q2)
//
// A session runs from a change out of offline to the next change into offline:
// [Start, End). Online, Idle and Invisible are the time spent in each status inside it;
// they add up to End - Start. While no change into offline is known, the session is Open,
// End is zero, and the three totals count up to Through (the fold's time when the row
// was written); from Through on the user was in Status, so a reader who wants the
// totals up to a later instant adds that instant minus Through to Status's total.
// A closed session has Through = End and Status = offline. A session is keyed by user
// and Start, which never changes once written.
//
// # Days (Q3)
//
// For each user and UTC day on which the user was present at some instant: Online,
// Idle and Invisible are the time in each status within [Day, Through), where Through is
// the day's end (the next midnight) once the day is complete and, before that, how far
// the fold's time had reached when the row was written. Spans crossing midnight are
// split there. Sessions is the number of sessions that overlap [Day, Through) (a session
// running through midnight counts on both days). FirstSeen and LastSeen are the first
// and the last instant of [Day, Through) at which the user was present (LastSeen is the
// last microsecond, so a user present at midnight has LastSeen 23:59:59.999999).
// Status is the user's status at Through, or at the day's last instant once Through is
// the day's end; while the day runs, a reader extends the totals to later instants the
// way it does for an open session.
//
// A day's row is written when a change of the user touches the day, once the day is
// Lateness old for a user who entered it present (so today's row of someone online
// since yesterday exists without waiting for midnight), and a last time once the day is
// final; it is not rewritten merely because time passes.
//
// # Concurrency (Q4)
//
// For a shard and a UTC minute, Online[s], Idle[s] and Invisible[s] are the number of
// the shard's users in that status at the end of second s of the minute: at the instant
// minute + s seconds + 999,999 µs. A change made at any microsecond of a second is
// therefore counted from that second on, and a user who comes and goes within one
// second is not counted at all. Close is the value of second 59 (the status at the
// minute's last instant) and PeakOnline the largest Online[s] of the minute.
//
// The per-second values are stored per shard, rather than only each shard's peak,
// because users are split across shards: the peaks of different shards fall at
// different seconds, so adding them up overstates the global peak. The global number
// online at any second is the sum of the shards' values for that second, and the
// global peak of a minute is the largest of those sums; it comes out exactly the same
// however many processes folded the shards.
//
// # Unique users (Q6)
//
// For a shard and a UTC hour, Users is a roaring bitmap of the dense indexes
// (docs/design.md guarantee 8) of the shard's users who were present at some instant
// of the hour. The users of a day, an ISO week (Monday to Monday) or a calendar month of
// one shard are the Union of that period's hours (Period.Hours lists them), and their
// number its cardinality. Indexes are per shard and a user belongs to one shard, so the
// unique users of all shards are the sum of each shard's cardinality; bitmaps of
// different shards are never unioned with each other. Shown is the same for the users
// online or idle at some instant of the hour: the unique users in a reader's view, where
// an invisible user is offline.
//
// # Lateness and finality
//
// Within a partition a user's changes arrive in changed_at order, but changes of
// different users may arrive out of order by up to Config.Lateness (clients' clocks
// may be up to 5 minutes from the server's, so the default is twice that). The caller
// promises, by Advance(t), that every later change has changed_at ≥ t - Lateness.
// The frontier is the largest such t - Lateness: a minute, hour or day whose end is at
// or before the frontier is final, no change can alter it any more, and its state is
// dropped at the next Flush. A change from before the frontier (later than promised) is
// moved up to the frontier, still in order for its user, and counted in Stats.Late;
// a change not after its user's previous one is a repeat (presence.changes is delivered
// at least once) and is dropped. Until the first Advance, the first change's time stands
// in for the watermark; a change dated more than a day past the fold's time is corrupt
// (no clock is that far off) and is dropped, so that no single record can make the fold
// hold years of minutes.
//
// The fold's time is the latest of the watermark and every change time applied. Rows
// exist for every minute and hour from the first the fold saw up to the one holding
// the fold's time. The rows of minutes and hours not yet final count the statuses as
// they are known, so they can still change; Flush hands out every row whose content may
// have changed since the last Flush, and handing one out twice is harmless because rows
// are idempotent upserts keyed as above.
//
// # State and checkpoints
//
// The fold keeps per user only what an unfinished day or session needs: nothing for a
// user who is offline and whose days are all final. It keeps per-second counts for
// unfinished minutes and a bitmap per unfinished hour; what became final is dropped by
// Flush, which the caller therefore calls regularly. MarshalBinary captures all of it,
// so that folding a prefix of the log, checkpointing, restoring and folding the rest
// hands out exactly the rows that folding everything at once would have.
package rollup
