// A Go program that allocates through cgo (C's malloc and free) from several goroutines
// while Go's runtime grows and moves goroutine stacks and collects garbage; `upscope leaks`
// must leave it unharmed: it prints its totals and exits with status 3.
package main

/*
#include <stdlib.h>
#include <string.h>
__attribute__((noinline)) static void *c_block(size_t n) { void *p = malloc(n); memset(p, 7, n); return p; }
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"
)

//go:noinline
func deep(n int) int {
	if n == 0 {
		return 1
	}
	var pad [256]byte
	pad[n%256] = byte(n)
	return deep(n-1) + int(pad[n%256]&1)
}

func main() {
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			sum := 0
			for i := 0; i < 500; i++ {
				p := C.c_block(C.size_t(64 + i%32))
				sum += int(*(*byte)(unsafe.Pointer(p)))
				if i%50 != 0 {
					C.free(p)
				}
				sum += deep(i % 40)
				if i%100 == 0 {
					runtime.GC()
				}
			}
			mu.Lock()
			total += sum
			mu.Unlock()
		}(g)
	}
	wg.Wait()
	fmt.Println("total", total)
	os.Exit(3)
}
