// Command pulse-aggregator folds the presence.events log into current state: per
// partition, in 100 ms windows, it dedupes events, applies timeouts, writes each
// user's state and the per-shard bitmaps to Redis, and emits effective changes to
// presence.changes before committing its offsets. `pulse-aggregator -help` lists the
// environment variables it reads.
package main

import "github.com/pulse-presence/pulse/internal/platform/app"

func main() { app.Main("aggregator", new(Config).vars(), run) }
