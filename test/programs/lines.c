/*
 * Target for probes by source line. The lines tests probe carry a comment "MARK:name", so a
 * test finds their numbers in this file rather than hard-coding them.
 * Usage: lines N    runs its loop N times and prints how often each marked line ran:
 *   "body N"   the loop body (MARK:loop_body)
 *   "twice N"  add_twice's body, inlined twice into work() and once into main() (MARK:inline_body)
 *   "odd N"    the odd branch of work() (MARK:odd_branch)
 */
#include <stdio.h>
#include <stdlib.h>

volatile long sink;
volatile long body_count;
volatile long twice_count;
volatile long odd_count;

static inline __attribute__((always_inline)) long add_twice(long x) {
  twice_count++; sink += x; /* MARK:inline_body */
  return x * 2;
}

__attribute__((noinline)) long work(long i) {
  long v = i * 3; /* MARK:work_first */
  /* MARK:no_code (a comment: no code is generated for this line) */
  if (v % 2 != 0) {
    odd_count++; v -= 1; /* MARK:odd_branch */
  }
  return v + add_twice(i) + add_twice(v & 3);
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 10;
  long total = 0;
  for (long i = 0; i < n; i++) {
    body_count++; /* MARK:loop_body */
    total += work(i);
    total += add_twice(total & 7);
  }
  sink = total;
  printf("body %ld\n", body_count);
  printf("twice %ld\n", twice_count);
  printf("odd %ld\n", odd_count);
  return 0;
}
