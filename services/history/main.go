// Command pulse-history appends every presence event and every effective change to
// Cassandra (user_status, user_activity), so Pulse can answer what was true at any
// moment in the past. It commits its Kafka offsets only after Cassandra acknowledged.
// `pulse-history -help` lists the environment variables it reads.
package main

import "github.com/pulse-presence/pulse/internal/platform/app"

func main() { app.Main("history", new(Config).vars(), run) }
