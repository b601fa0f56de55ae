// Target for probes placed and removed while a Go program runs on several threads: 4
// goroutines each call main.step() N times (argv[1]); step() starts with Go's stack check (a
// compare and a conditional jump). The program prints its own count of calls and a checksum
// of the results, which probes must not change.
//
//	race-loop N
package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
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
