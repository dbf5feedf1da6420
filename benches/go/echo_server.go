// The echo server of examples/echo_server.rs in Go, the comparison for benches/scaling.sh
// ("Every core (issue 15)" in BENCHMARKS.md): one goroutine per connection, each reading up to
// 16 KiB and writing it back until the client closes (Go sets TCP_NODELAY by default). Run it
// with GOMAXPROCS=N for N workers. Build: go build -o echo_server benches/go/echo_server.go
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7000", "where to listen")
	flag.Parse()
	listener, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "go_echo_server: cannot listen on %s: %v\n", *addr, err)
		os.Exit(1)
	}
	fmt.Printf("go_echo_server: listening on %s\n", listener.Addr())
	for {
		conn, err := listener.Accept()
		if err != nil {
			fmt.Fprintf(os.Stderr, "go_echo_server: accept failed: %v\n", err)
			continue
		}
		go echo(conn)
	}
}

// echo writes back what the client sends until it closes.
func echo(conn net.Conn) {
	defer conn.Close()
	buf := make([]byte, 16*1024)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
				fmt.Fprintf(os.Stderr, "go_echo_server: reading: %v\n", err)
			}
			return
		}
	}
}
