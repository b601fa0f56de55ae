// Target for probes placed and removed while a Go program runs on several threads: 4
// goroutines each call main.step() N times (argv[1]); step() starts with Go's stack check (a
// compare and a conditional jump). The program prints its own count of calls and a checksum
// of the results, which probes must not change. With `until FILE`, the goroutines call it
// until FILE exists (looked for every millisecond), then 100,000 times more each, and the
// program also prints the calls its goroutines counted and the checksum those calls make.
//
//	race-loop N
//	race-loop until FILE
package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
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

func until(file string) {
	var stopping atomic.Bool
	sums := make([]int64, 4)
	loops := make([]int64, 4)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			i := int64(0)
			for ; !stopping.Load(); i++ {
				sums[g] += step(i)
			}
			for end := i + 100000; i < end; i++ {
				sums[g] += step(i)
			}
			loops[g] = i
		}(g)
	}
	for {
		if _, err := os.Stat(file); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	stopping.Store(true)
	wg.Wait()
	var looped, checksum, expected int64
	for g := 0; g < 4; g++ {
		looped += loops[g]
		checksum += sums[g]
		// step(i) returns 2i+2: n calls from 0 sum to n(n+1).
		expected += loops[g] * (loops[g] + 1)
	}
	fmt.Printf("calls=%d checksum=%d\n", atomic.LoadInt64(&calls), checksum)
	fmt.Printf("loops=%d expected=%d\n", looped, expected)
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "until" {
		until(os.Args[2])
		return
	}
	n, err := strconv.ParseInt(os.Args[1], 10, 64)
	if err != nil {
		os.Exit(2)
	}
	sums := make([]int64, 4)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := int64(0); i < n; i++ {
				sums[g] += step(i)
			}
		}(g)
	}
	wg.Wait()
	fmt.Printf("calls=%d checksum=%d\n", atomic.LoadInt64(&calls), sums[0]+sums[1]+sums[2]+sums[3])
}
