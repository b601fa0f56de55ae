/*
 * Target for deep stacks (built with -O2 -fomit-frame-pointer): unwind_deep_leaf() called at
 * the bottom of a recursion DEPTH frames deep.
 *
 *   unwind-deep N DEPTH   calls unwind_deep_leaf() N times, each DEPTH calls of
 *                         unwind_descend() down, prints {"calls":N,"sum":S}
 */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long unwind_deep_leaf(long v) {
  __asm__ volatile("");
  return v + 1;
}

__attribute__((noinline)) long unwind_descend(long depth, long v) {
  long r = depth == 0 ? unwind_deep_leaf(v) : unwind_descend(depth - 1, v);
  // Work after the call keeps it a call (not a jump), so each level is a frame.
  __asm__ volatile("");
  return r + depth;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100;
  long depth = argc > 2 ? atol(argv[2]) : 10;
  long sum = 0;
  for (long i = 0; i < n; i++) sum += unwind_descend(depth, i);
  printf("{\"calls\":%ld,\"sum\":%ld}\n", n, sum);
  return 0;
}
