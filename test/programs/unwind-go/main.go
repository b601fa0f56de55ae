// Target for Go stacks: main.leaf is 3 frames deep below main.main, each kept out of line.
//
//	unwind-go N   calls main.leaf N times through main.top and main.middle, prints
//	              {"calls":N,"sum":S}
package main

import (
	"fmt"
	"os"
	"strconv"
)

//go:noinline
func leaf(v int) int { return v + 1 }

//go:noinline
func middle(v int) int { return leaf(v) * 3 }

//go:noinline
func top(v int) int { return middle(v) + 2 }

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	sum := 0
	for i := 0; i < n; i++ {
		sum += top(i)
	}
	fmt.Printf("{\"calls\":%d,\"sum\":%d}\n", n, sum)
}
