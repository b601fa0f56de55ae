// Target for the tests of tracers side by side, in Go: prints "ready PID", waits until the
// file GO exists, then calls main.step() (which starts with Go's stack check, a compare and a
// conditional jump) with a short pause every 10 calls until the file STOP exists; then prints
// "calls N", its own count of calls. Go's runtime may enter a function's first instruction
// again (after growing or preempting a goroutine at its stack check): probes count entries,
// which may be more than the calls.
//
//	coexist-loop GO STOP
package main

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

var calls int64

//go:noinline
func leaf(i int64) int64 { return i*2 + 1 }

//go:noinline
func step(i int64) int64 {
	atomic.AddInt64(&calls, 1)
	return leaf(i) + 1
}

func main() {
	if len(os.Args) < 3 {
		os.Exit(2)
	}
	fmt.Printf("ready %d\n", os.Getpid())
	for {
		if _, err := os.Stat(os.Args[1]); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var sum int64
	for i := int64(0); ; i++ {
		if _, err := os.Stat(os.Args[2]); err == nil {
			break
		}
		sum += step(i)
		if i%10 == 9 {
			time.Sleep(time.Millisecond)
		}
	}
	fmt.Printf("calls %d sum %d\n", atomic.LoadInt64(&calls), sum)
}
