/*
 * Target for stacks without frame pointers (built with -O2 -fomit-frame-pointer): unwind_leaf()
 * is 4 frames deep, through a shared library: main -> unwind_top -> unwind_lib_mid (in
 * libunwind-lib) -> unwind_leaf.
 *
 *   unwind-app N WAIT_MS   after WAIT_MS, calls unwind_leaf() N times that way, prints
 *                          {"calls":N,"sum":S}, then waits WAIT_MS again before it exits
 *   unwind-app -1 0        calls it once a millisecond until killed
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

long unwind_lib_mid(long v, long (*callback)(long));

__attribute__((noinline)) long unwind_leaf(long v) {
  __asm__ volatile("");
  return v + 1;
}

__attribute__((noinline)) long unwind_top(long v) {
  long r = unwind_lib_mid(v, unwind_leaf);
  __asm__ volatile("");
  return r * 2;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100;
  long wait_ms = argc > 2 ? atol(argv[2]) : 0;
  usleep(wait_ms * 1000);
  long sum = 0;
  for (long i = 0; n < 0; i++) {
    sum += unwind_top(i);
    usleep(1000);
  }
  for (long i = 0; i < n; i++) sum += unwind_top(i);
  printf("{\"calls\":%ld,\"sum\":%ld}\n", n, sum);
  fflush(stdout);
  usleep(wait_ms * 1000);
  return 0;
}
