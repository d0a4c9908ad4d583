// Command pulse-query is Pulse's read edge: current statuses, online counts and the
// live change feed, answered from the state the aggregator keeps in Redis.
// `pulse-query -help` lists the environment variables it reads.
package main

import "github.com/pulse-presence/pulse/internal/platform/app"

func main() { app.Main("query", new(Config).vars(), run) }
