// The stack benchmark's target: hot_leaf() called N times (argv[1]) at the bottom of a
// recursion DEPTH frames deep (argv[2]), timed by the program itself: it prints
// `calls=N ns_per_call=F` on stderr (F = loop wall time / N), as hot.c does, so that a probe's
// cost per hit is a probed run's F less a bare run's. Built both with and without frame
// pointers; descend() re-enters itself once per level of depth, so each level is a frame.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

// As in hot.c: the clobbered %rbx makes the function start with `push %rbx`, an instruction
// the kernel emulates on a uprobe hit (no single-step trap).
__attribute__((noinline, noipa)) long hot_leaf(long x) {
  __asm__ volatile("" ::: "rbx");
  return x + 1;
}

__attribute__((noinline, noipa)) long descend(long depth, long n) {
  long r = 0;
  if (depth <= 1) {
    for (long i = 0; i < n; i++) r = hot_leaf(r);
  } else {
    r = descend(depth - 1, n);
  }
  __asm__ volatile("" ::: "rbx");
  return r + 1;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? strtol(argv[1], NULL, 10) : 1000000;
  long depth = argc > 2 ? strtol(argv[2], NULL, 10) : 1;
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  long x = descend(depth, n);
  clock_gettime(CLOCK_MONOTONIC, &end);
  double ns = (double)(end.tv_sec - start.tv_sec) * 1e9 + (double)(end.tv_nsec - start.tv_nsec);
  fprintf(stderr, "calls=%ld ns_per_call=%.2f x=%ld\n", n, n > 0 ? ns / (double)n : 0.0, x);
  return 0;
}
