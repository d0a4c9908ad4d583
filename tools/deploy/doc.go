// Package deploy pins Helm (a tool directive in go.mod) and checks, offline, what
// deploy/helm/pulse renders and what deploy/observability queries: every rendered
// manifest decodes strictly into the Kubernetes API's Go types (k8s.io/api, and the
// prometheus-operator's for the ServiceMonitor), so a misspelt or misplaced field fails
// as the API server would refuse it; the chart's wiring (probes, ports, Secrets mounted
// where the PULSE_*_FILE variables point, variables the services read) holds; and every
// metric the dashboard and the alert rules name is one the services export.
//
// It is a module of its own, outside go.work, for the same reason as tools/: Helm's and
// Kubernetes' dependencies stay out of Pulse's build lists. Run it with GOWORK=off;
// `make test-deploy` builds bin/tools/helm first and runs it.
package deploy
