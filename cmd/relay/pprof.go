package main

import (
	"context"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// servePprof serves Go's runtime profiles on addr under /debug/pprof/ until
// stop is called, and returns the address it listens on. The handlers get a mux of their own: importing
// net/http/pprof for its side effect would put them on every default mux.
func servePprof(addr string) (bound net.Addr, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed at stop
	return ln.Addr(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx) //nolint:errcheck // best effort at exit
	}, nil
}
