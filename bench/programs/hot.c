// The benchmark target: hot_function() called N times in a tight loop (N from argv[1]); the
// loop times itself and prints `calls=N ns_per_call=F`, so a probe's cost per hit is the
// difference between a probed run and a bare one. The line goes to stderr, so that a tracer's
// stdout can go to /dev/null or a file without losing it.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

// The empty asm claims to clobber %rbx, a callee-saved register, so the function starts with
// `push %rbx`, an instruction the kernel emulates on a uprobe hit, as it does the `push %rbp`
// that begins most functions built with frame pointers. Without it gcc -O2 starts with `lea`,
// which the kernel must single-step out of line, a trap more per hit.
__attribute__((noinline, noipa)) int hot_function(int x) {
  __asm__ volatile("" ::: "rbx");
  return x + 1;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? strtol(argv[1], NULL, 10) : 1000000;
  struct timespec start, end;
  int x = 0;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (long i = 0; i < n; i++) x = hot_function(x);
  clock_gettime(CLOCK_MONOTONIC, &end);
  double ns = (double)(end.tv_sec - start.tv_sec) * 1e9 + (double)(end.tv_nsec - start.tv_nsec);
  // x depends on every call, so none can be optimised away; printing it keeps it live.
  fprintf(stderr, "calls=%ld ns_per_call=%.2f x=%d\n", n, n > 0 ? ns / (double)n : 0.0, x);
  return 0;
}
