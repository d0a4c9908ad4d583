package httpserver

import (
	"net/http"
	"net/http/pprof"
	"strings"
)

// servePProf serves net/http/pprof's handlers without touching http.DefaultServeMux.
func servePProf(w http.ResponseWriter, r *http.Request) {
	switch strings.TrimPrefix(r.URL.Path, "/debug/pprof/") {
	case "cmdline":
		pprof.Cmdline(w, r)
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		pprof.Index(w, r)
	}
}
