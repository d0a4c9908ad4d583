// Command pulse-ingest is Pulse's write edge: it validates status events from
// producers over HTTP and appends them to the Kafka topic presence.events, keyed by
// user id, answering 2xx only once Kafka has acknowledged them. `pulse-ingest -help`
// lists the environment variables it reads.
package main

import "github.com/pulse-presence/pulse/internal/platform/app"

func main() { app.Main("ingest", new(Config).vars(), run) }
