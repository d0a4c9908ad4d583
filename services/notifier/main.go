// Command pulse-notifier delivers presence changes to webhook endpoints: signed JSON
// batches, in order per user, retried with backoff and dead-lettered when an endpoint
// will not take them (docs/webhooks.md). It is a consumer group on presence.changes,
// like history, and commits an offset only once every endpoint got or dead-lettered
// the changes before it. `pulse-notifier -help` lists the environment variables it
// reads.
package main

import "github.com/pulse-presence/pulse/internal/platform/app"

func main() { app.Main("notifier", new(Config).vars(), run) }
