// Target for fetching a Go function's arguments by name: main.describe(n, name, vals) is
// called CALLS times (argv[1]) with n = i, name = "item-i" and vals = i+1 ints (capacity
// 2i+2); Go's register ABI passes a string as two registers and a slice as three (the
// value in pieces: DW_OP_piece). Prints "call n=N len=L cap=C" before each call.
//
//	go-args CALLS
package main

import (
	"fmt"
	"os"
	"strconv"
)

//go:noinline
func describe(n int, name string, vals []int) int {
	return n + len(name) + len(vals)
}

func main() {
	calls, _ := strconv.Atoi(os.Args[1])
	sum := 0
	for i := 0; i < calls; i++ {
		name := "item-" + strconv.Itoa(i)
		vals := make([]int, i+1, 2*i+2)
		fmt.Printf("call n=%d len=%d vlen=%d cap=%d\n", i, len(name), len(vals), cap(vals))
		sum += describe(i, name, vals)
	}
	fmt.Printf("sum %d\n", sum)
}
