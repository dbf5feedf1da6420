// The Go side of benches/scale_compare.sh: the same three measurements as greenweave's
// examples/spawn_park.rs and examples/yield_table.rs, with goroutines.
//
//	go run scale.go spawn-park N    spawn N goroutines that each block on one channel,
//	                                wait until all are blocked, report the time and the
//	                                resident memory added per goroutine, then release them
//	go run scale.go yield N ROUNDS  N goroutines each call runtime.Gosched ROUNDS times;
//	                                report nanoseconds per Gosched
//
// Run with GOMAXPROCS=1 for the same single-OS-thread setting as one greenweave runtime (the
// script does). Output is one line of key=value pairs, read by the script.
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// rssBytes reads VmRSS from /proc/self/status.
func rssBytes() int64 {
	file, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer file.Close()
	scanner := bufio.NewScanner(file)
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(line, "VmRSS:") {
			fields := strings.Fields(line)
			kib, _ := strconv.ParseInt(fields[1], 10, 64)
			return kib * 1024
		}
	}
	return 0
}

func spawnPark(count int) {
	before := rssBytes()
	release := make(chan struct{})
	var parked int64
	var done sync.WaitGroup
	done.Add(count)
	start := time.Now()
	for i := 0; i < count; i++ {
		go func() {
			atomic.AddInt64(&parked, 1)
			<-release
			done.Done()
		}()
	}
	for atomic.LoadInt64(&parked) < int64(count) {
		runtime.Gosched()
	}
	elapsed := time.Since(start)
	during := rssBytes()
	close(release)
	done.Wait()
	fmt.Printf("count=%d ns_per_spawn_park=%.1f rss_per_parked=%.0f\n", count,
		float64(elapsed.Nanoseconds())/float64(count), float64(during-before)/float64(count))
}

func yieldTable(count, rounds int) {
	var ready, done sync.WaitGroup
	ready.Add(count)
	done.Add(count)
	start := make(chan struct{})
	for i := 0; i < count; i++ {
		go func() {
			ready.Done()
			<-start
			for r := 0; r < rounds; r++ {
				runtime.Gosched()
			}
			done.Done()
		}()
	}
	ready.Wait()
	began := time.Now()
	close(start)
	done.Wait()
	elapsed := time.Since(began)
	fmt.Printf("count=%d rounds=%d ns_per_yield=%.1f\n", count, rounds,
		float64(elapsed.Nanoseconds())/float64(count*rounds))
}

func main() {
	usage := "usage: scale spawn-park N | scale yield N ROUNDS"
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	count, err := strconv.Atoi(os.Args[2])
	if err != nil || count < 1 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "spawn-park":
		spawnPark(count)
	case "yield":
		rounds := 100
		if len(os.Args) > 3 {
			rounds, err = strconv.Atoi(os.Args[3])
			if err != nil || rounds < 1 {
				fmt.Fprintln(os.Stderr, usage)
				os.Exit(2)
			}
		}
		yieldTable(count, rounds)
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
}
