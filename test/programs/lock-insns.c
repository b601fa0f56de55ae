/*
 * Target for probes on lock-prefixed instructions, which the kernel's uprobes refuse: at -O2
 * locked_add() starts with `lock add` (no prologue), and the line marked LOCK-LINE below is
 * the `lock add` of locked_count(). It calls each N times (argv[1]), from 2 threads, and
 * prints how many calls it made and the counters the locked adds kept: a probe that ran the
 * instruction without its lock, or twice, or not at all, shows in them.
 * locked_halt() starts with `hlt`, which no engine can probe, and is never called: with the
 * others, it makes the pattern `locked_*` match functions each engine must skip.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

long added;
long counted;
volatile long sink;

__attribute__((noipa)) void locked_add(long by) { __atomic_fetch_add(&added, by, __ATOMIC_SEQ_CST); }

__attribute__((noipa)) void locked_count(long i) {
  sink = i;
  __atomic_fetch_add(&counted, 1, __ATOMIC_SEQ_CST); /* LOCK-LINE */
}

__attribute__((noipa)) void locked_halt(void) { __asm__ volatile("hlt"); }

static long calls;

static void *run(void *arg) {
  (void)arg;
  for (long i = 0; i < calls; i++) {
    locked_add(2);
    locked_count(i);
  }
  return NULL;
}

int main(int argc, char **argv) {
  calls = argc > 1 ? atol(argv[1]) : 1000;
  pthread_t threads[2];
  for (int t = 0; t < 2; t++) pthread_create(&threads[t], NULL, run, NULL);
  for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
  printf("calls=%ld added=%ld counted=%ld\n", 2 * calls, added, counted);
  return 0;
}
