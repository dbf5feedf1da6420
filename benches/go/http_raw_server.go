// The HTTP server of examples/http_server.rs hand-rolled in Go on net.Conn, without net/http:
// the same replies, byte for byte, and the same batching (one write per batch of pipelined
// requests), so that it measures the runtimes rather than the HTTP libraries. The comparison
// for benches/scaling.sh ("Every core (issue 15)" in BENCHMARKS.md), next to net/http. Only what
// the benchmark sends is parsed carefully: the request line, Content-Length and Connection.
// Run it with GOMAXPROCS=N for N workers. Build: go build -o x benches/go/http_raw_server.go
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
)

var (
	ok         = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!")
	okClose    = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\nConnection: close\r\n\r\nHello, World!")
	badRequest = []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "where to listen")
	flag.Parse()
	listener, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "go_http_raw_server: cannot listen on %s: %v\n", *addr, err)
		os.Exit(1)
	}
	fmt.Printf("go_http_raw_server: listening on %s\n", listener.Addr())
	for {
		conn, err := listener.Accept()
		if err != nil {
			fmt.Fprintf(os.Stderr, "go_http_raw_server: accept failed: %v\n", err)
			continue
		}
		go serve(conn)
	}
}

// serve answers the connection's requests until the client closes it or asks to.
func serve(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReaderSize(conn, 16*1024)
	w := bufio.NewWriterSize(conn, 4096)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		parts := bytes.Fields(line)
		if len(parts) != 3 || !bytes.HasPrefix(parts[2], []byte("HTTP/1.")) {
			w.Write(badRequest)
			w.Flush()
			return
		}
		closing := bytes.Equal(parts[2], []byte("HTTP/1.0"))
		length := 0
		for {
			header, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(bytes.TrimSpace(header)) == 0 {
				break
			}
			name, value, found := bytes.Cut(header, []byte(":"))
			if !found {
				w.Write(badRequest)
				w.Flush()
				return
			}
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, []byte("Connection")):
				closing = bytes.EqualFold(value, []byte("close"))
			case bytes.EqualFold(name, []byte("Content-Length")):
				if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
					w.Write(badRequest)
					w.Flush()
					return
				}
			}
		}
		if _, err := r.Discard(length); err != nil {
			return
		}
		if closing {
			w.Write(okClose)
			w.Flush()
			return
		}
		w.Write(ok)
		// One write per batch: flush only when no further request is already buffered.
		if r.Buffered() == 0 {
			if w.Flush() != nil {
				return
			}
		}
	}
}
