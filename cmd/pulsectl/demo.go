package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// runDemo serves the demo chat page (examples/chat) and the built JavaScript client
// (clients/js/dist) on one origin, with /config.json telling the page where ingest and
// query are. It is a development server: files from disk, no credentials of its own —
// the person (or test) using the page pastes a user token minted by `pulsectl token`.
// Ingest and query must allow its origin (PULSE_CORS_ORIGINS, PULSE_FEED_ORIGINS), as
// `make run` sets them.
func runDemo(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:18090", "where the page is served")
	dir := fs.String("dir", "examples/chat", "the page's `folder`")
	client := fs.String("client", "clients/js/dist", "the built client's `folder` (cd clients/js && npm ci && npm run build)")
	ingest := fs.String("ingest", "http://127.0.0.1:18080", "ingest's URL, as the browser reaches it")
	query := fs.String("query", "http://127.0.0.1:18081", "query's URL, as the browser reaches it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo takes no arguments, got %q", fs.Args())
	}
	for _, f := range []string{filepath.Join(*dir, "index.html"), filepath.Join(*client, "index.js")} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s: %w (run from the repository's top folder; build the client with cd clients/js && npm ci && npm run build)", f, err)
		}
	}
	cfg, err := json.Marshal(map[string]string{"ingestUrl": *ingest, "queryUrl": *query})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /client/", http.StripPrefix("/client/", http.FileServer(http.Dir(*client))))
	mux.HandleFunc("GET /config.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(cfg)
	})
	mux.Handle("GET /", http.FileServer(http.Dir(*dir)))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "demo chat page at http://%s/ (ingest %s, query %s)\n", ln.Addr(), *ingest, *query)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
