// Target for probes on Go code: `go-returns MODE N`. Each mode keeps its own counts of what
// it did and prints them (and nothing that depends on timing), so that a probed run can be
// checked against its own account and against an unprobed run's output.
//
//	deep N    8 goroutines call deep() N times each, 20 to 27 levels of recursion with frames
//	          of 4 KiB: their stacks grow (and are copied) while calls are open
//	paths N   classify(a, b, c) N times, which returns from four places; one line per call
//	panic N   guard() calls mayPanic(), which calls inner(); a third of the calls panic in
//	          inner() and guard() recovers: mayPanic() and inner() are left by the panic
//	chan N    N goroutines park in wait() on a channel until all are parked, then wait 20 ms
//	          more; a sender on a thread of its own wakes them: most resume on a thread other
//	          than the one they parked on (the program counts how many)
//	spawn N   run(k) runs /bin/true N times with os/exec (a clone with CLONE_VFORK: the
//	          calling thread waits in the kernel until the child has execed)
package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var deepCalls, deepReturns int64

//go:noinline
func deep(n int, seed int) int {
	atomic.AddInt64(&deepCalls, 1)
	var frame [512]int
	frame[n%512] = seed
	if n == 0 {
		atomic.AddInt64(&deepReturns, 1)
		return frame[0] + seed
	}
	r := deep(n-1, seed+1) + frame[n%512]
	atomic.AddInt64(&deepReturns, 1)
	return r
}

func runDeep(rounds int) {
	var wg sync.WaitGroup
	var sum int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				atomic.AddInt64(&sum, int64(deep(20+g, i)))
			}
		}(g)
	}
	wg.Wait()
	fmt.Printf("deep calls=%d returns=%d sum=%d\n", deepCalls, deepReturns, sum)
}

//go:noinline
func classify(a, b, c int) int {
	if a < 0 {
		return -1
	}
	if a%5 == 0 {
		return a + b
	}
	if b > c {
		return b - c + 1000
	}
	return a*b + c
}

func runPaths(n int) {
	for i := 0; i < n; i++ {
		a, b, c := i, i*7%11, i*3
		fmt.Printf("classify %d %d %d -> %d\n", a, b, c, classify(a, b, c))
	}
}

var panicCalls, panicReturns, innerCalls, innerReturns, recovered int64

//go:noinline
func inner(i int) int {
	innerCalls++
	if i%3 == 0 {
		panic(fmt.Sprintf("boom %d", i))
	}
	innerReturns++
	return i * 2
}

//go:noinline
func mayPanic(i int) int {
	panicCalls++
	r := inner(i) + 1
	panicReturns++
	return r
}

//go:noinline
func guard(i int) (r int) {
	defer func() {
		if recover() != nil {
			recovered++
			r = -1
		}
	}()
	return mayPanic(i)
}

func runPanic(n int) {
	sum := 0
	for i := 0; i < n; i++ {
		sum += guard(i)
	}
	fmt.Printf("panic calls=%d returns=%d inner_calls=%d inner_returns=%d recovered=%d sum=%d\n",
		panicCalls, panicReturns, innerCalls, innerReturns, recovered, sum)
}

var parked, waitCalls, waitReturns, moved int64

//go:noinline
func wait(ch chan int, id int) int {
	atomic.AddInt64(&waitCalls, 1)
	before := syscall.Gettid()
	atomic.AddInt64(&parked, 1)
	v := <-ch
	if syscall.Gettid() != before {
		atomic.AddInt64(&moved, 1)
	}
	atomic.AddInt64(&waitReturns, 1)
	return v + id
}

func runChan(n int) {
	ch := make(chan int)
	var wg sync.WaitGroup
	var sum int64
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			atomic.AddInt64(&sum, int64(wait(ch, g)))
		}(g)
	}
	for atomic.LoadInt64(&parked) < int64(n) {
		time.Sleep(time.Millisecond)
	}
	// Every wait() is parked (or about to be): none returns before these 20 ms are over.
	time.Sleep(20 * time.Millisecond)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		for i := 0; i < n; i++ {
			ch <- i
		}
		close(done)
	}()
	<-done
	wg.Wait()
	fmt.Printf("chan calls=%d returns=%d sum=%d\n", waitCalls, waitReturns, sum)
	fmt.Fprintf(os.Stderr, "moved=%d\n", moved)
}

var ranCalls int64

//go:noinline
func run(k int) int {
	atomic.AddInt64(&ranCalls, 1)
	if err := exec.Command("/bin/true").Run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	return k
}

func runSpawn(n int) {
	sum := 0
	for k := 0; k < n; k++ {
		sum += run(k)
	}
	fmt.Printf("spawn calls=%d sum=%d\n", ranCalls, sum)
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go-returns deep|paths|panic|chan|spawn N")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "deep":
		runDeep(n)
	case "paths":
		runPaths(n)
	case "panic":
		runPanic(n)
	case "chan":
		runChan(n)
	case "spawn":
		runSpawn(n)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}
