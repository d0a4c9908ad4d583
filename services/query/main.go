// Command pulse-query is Pulse's read edge: current statuses, online counts and the
// live change feed, answered from the state the aggregator keeps in Redis.
package main

import "github.com/pulse-presence/pulse/pkg/app"

func main() { app.Main("query", run) }
