/*
 * Target for counting by user stack: stack_leaf() is called from two callers, through two
 * call sites in one of them, so that each path is a stack of its own.
 *
 *   bpf-stacks A B WAIT_MS   after WAIT_MS, via_a() calls stack_leaf() A times and via_b()
 *                            B times (twice each: two call sites); then prints its account
 *                            and, with WAIT_MS > 0, waits as long again before it exits
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) long stack_leaf(long v) {
  __asm__ volatile("");
  return v + 1;
}

__attribute__((noinline)) long via_a(long v) {
  long r = stack_leaf(v);
  __asm__ volatile("");
  return r;
}

__attribute__((noinline)) long via_b(long v) {
  long r = stack_leaf(v);
  r += stack_leaf(v + 1);
  __asm__ volatile("");
  return r;
}

static void on_start(int sig) { (void)sig; }

int main(int argc, char **argv) {
  long a = argc > 1 ? atol(argv[1]) : 300;
  long b = argc > 2 ? atol(argv[2]) : 200;
  long wait_ms = argc > 3 ? atol(argv[3]) : 0;
  /* The wait after the calls (for -p: upscope reads the map before the process ends). */
  long after_ms = argc > 4 ? atol(argv[4]) : wait_ms;
  /* A test may end the first wait early with SIGUSR1 (once upscope has attached). */
  signal(SIGUSR1, on_start);
  usleep(wait_ms * 1000);
  long sum = 0;
  for (long i = 0; i < a; i++) sum += via_a(i);
  for (long i = 0; i < b; i++) sum += via_b(i);
  printf("{\"via_a\":%ld,\"via_b\":%ld,\"sum\":%ld}\n", a, b, sum);
  fflush(stdout);
  usleep(after_ms * 1000);
  return 0;
}
