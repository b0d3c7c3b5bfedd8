package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"time"
)

// servePprof serves Go's runtime profiles on addr under /debug/pprof/ until
// stop is called, and returns the address it listens on. The handlers get a mux of their own: importing
// net/http/pprof for its side effect would put them on every default mux.
// /debug/pprof/cmdline is not served: the command line holds every secret
// given as a flag (the database password, SASL passwords, tokens, webhook
// secrets). The other profiles hold code paths, counts and argument words
// of stack frames, never the contents of memory.
func servePprof(addr string) (bound net.Addr, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not served: the command line may hold secrets", http.StatusNotFound)
	})
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

// isLoopbackAddr reports whether the host of addr (host:port) is a
// loopback address or localhost. An empty host is every interface.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// notLoopback explains why a --pprof-addr that is not loopback is
// refused: the profiles are served to whoever connects, and a CPU profile
// or a trace costs the relay CPU while it runs.
func notLoopback(addr string) string {
	return fmt.Sprintf("%q is not a loopback address (127.0.0.1, ::1 or localhost), and whoever reaches it could read the profiles; use 127.0.0.1:PORT (with kubectl port-forward or an SSH tunnel)", addr)
}
