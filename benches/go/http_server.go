// The HTTP server of examples/http_server.rs as Go users write it, with net/http: every request
// answered 200 "Hello, World!" (text/plain). The comparison for benches/scaling.sh ("Every core
// (issue 15)" in BENCHMARKS.md). net/http does more per request than our servers (a Date
// header, a header map, a Request value, a goroutine-per-connection bufio pair): that is what
// Go users run. Run it with GOMAXPROCS=N for N workers.
// Build: go build -o http_server benches/go/http_server.go
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "where to listen")
	flag.Parse()
	listener, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "go_http_server: cannot listen on %s: %v\n", *addr, err)
		os.Exit(1)
	}
	fmt.Printf("go_http_server: listening on %s\n", listener.Addr())
	body := []byte("Hello, World!")
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	})
	if err := http.Serve(listener, handler); err != nil {
		fmt.Fprintf(os.Stderr, "go_http_server: %v\n", err)
		os.Exit(1)
	}
}
