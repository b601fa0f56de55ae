// Go target (cgo) for probes on an IFUNC (libc's strlen): `ifunc-calls N LENGTH` measures a
// C string of LENGTH bytes N times with C.strlen, from Go, and prints how many it measured
// and their total length.
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
	total := 0
	for i := 0; i < n; i++ {
		total += int(C.strlen(s))
	}
	fmt.Printf("calls=%d total=%d\n", n, total)
}
