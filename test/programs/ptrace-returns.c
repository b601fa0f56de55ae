/*
 * Target for return probes: recursion (fact), and a longjmp out of six nested calls of dive()
 * that never return; then more recursion. A return probe must pair every return of fact()
 * with its own call across all of it, and the program must print what it prints untraced.
 */
#include <setjmp.h>
#include <stdio.h>

static jmp_buf env;

static long fact_calls;

__attribute__((noipa)) long fact(long n) {
  fact_calls++;
  if (n <= 1) return 1;
  long r = fact(n - 1);
  __asm__ volatile("" : "+r"(r)); /* keeps the recursion a real call: no accumulator loop */
  return n * r;
}

__attribute__((noipa)) void dive(int depth) {
  if (depth == 0) longjmp(env, 1);
  dive(depth - 1);
  __asm__ volatile("" ::: "memory"); /* no tail call: every level has its own frame */
}

int main(void) {
  long total = 0;
  for (int i = 0; i < 100; i++) total += fact(10);
  int jumps = 0;
  for (int i = 0; i < 50; i++) {
    if (setjmp(env) == 0)
      dive(5);
    else
      jumps++;
  }
  for (int i = 0; i < 100; i++) total += fact(5);
  printf("total=%ld jumps=%d fact_calls=%ld\n", total, jumps, fact_calls);
  return 0;
}
