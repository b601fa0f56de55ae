// Target for the inject engine's memory and string fetches in Go: calls main.greet(rec)
// CALLS times (argv[1]) from 4 goroutines, each its own i = goroutine * CALLS + n; rec is
// {id = i, name = the address of "call-I" (NUL-terminated bytes), small = -i}, except when
// i % 10 == 0: name is 16 (nothing is mapped there; greet does not read it). Prints
// "calls N sum S", S the sum of what greet returned (id * 2 + 1).
//
//	inject-fetches CALLS
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"unsafe"
)

// Where each goroutine's last name is kept: it escapes to the heap, whose objects never move
// (a name on a goroutine's stack would, when the stack grows, and rec.name with it not).
var keep [4][]byte

type rec struct {
	id    int64
	name  uintptr
	small int32
}

//go:noinline
func greet(r *rec) int64 {
	return r.id*2 + 1
}

func main() {
	count, _ := strconv.ParseInt(os.Args[1], 10, 64)
	var wg sync.WaitGroup
	sums := make([]int64, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for n := int64(0); n < count; n++ {
				i := int64(g)*count + n
				name := []byte("call-" + strconv.FormatInt(i, 10) + "\x00")
				keep[g] = name
				r := &rec{id: i, name: uintptr(unsafe.Pointer(&name[0])), small: int32(-i)}
				if i%10 == 0 {
					r.name = 16
				}
				sums[g] += greet(r)
				runtime.KeepAlive(name)
			}
		}(g)
	}
	wg.Wait()
	fmt.Printf("calls %d sum %d\n", 4*count, sums[0]+sums[1]+sums[2]+sums[3])
}
