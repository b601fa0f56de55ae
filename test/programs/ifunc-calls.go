// Go target (cgo) for probes on IFUNCs (libc's strlen and memset): `ifunc-calls N LENGTH`
// fills a C buffer of LENGTH+1 bytes with C.memset and measures a C string of LENGTH bytes with
// C.strlen, N times each, from Go, and prints how many it measured and their total length.
package main

/*
#include <stdlib.h>
#include <string.h>
*/
import "C"

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"
)

func arg(i, fallback int) int {
	if len(os.Args) > i {
		if n, err := strconv.Atoi(os.Args[i]); err == nil {
			return n
		}
	}
	return fallback
}

func main() {
	n, length := arg(1, 1000), arg(2, 73)
	s := C.CString(strings.Repeat("x", length))
	defer C.free(unsafe.Pointer(s))
	buffer := C.malloc(C.size_t(length + 1))
	defer C.free(buffer)
	total := 0
	for i := 0; i < n; i++ {
		C.memset(buffer, 'y', C.size_t(length+1))
		total += int(C.strlen(s))
	}
	fmt.Printf("calls=%d total=%d\n", n, total)
}
