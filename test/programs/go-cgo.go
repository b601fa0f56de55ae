// A Go program with a C function linked in by cgo: the Go function takes its arguments in
// Go's registers, the C one in the C ABI's. Prints what each returned.
package main

/*
__attribute__((noinline)) long c_add3(long a, long b, long c) { return a + b * 10 + c * 100; }
*/
import "C"

import "fmt"

//go:noinline
func goAdd3(a, b, c int) int { return a + b*10 + c*100 }

func main() {
	fmt.Println(int(C.c_add3(1, 2, 3)), goAdd3(4, 5, 6))
}
