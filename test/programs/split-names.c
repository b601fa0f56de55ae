// Functions that only .symtab names (static, so not in .dynsym), for the tests of separate
// debug files: the binary is split as distributions ship it (stripped file + debug file) and
// probes, listings and stack frames must still name them. main calls middle_step ROUNDS times
// (argv[1], default 3), which calls leaf_work; each counts its calls, and the program prints
// "name count" lines at the end. malloc_rounds (argv[2], default 0) mallocs and frees a block
// too large for malloc's caches that many times, for the tests of libc's debug symbols. With
// argv[3] "wait", it prints "ready" and waits for SIGUSR1 before it starts (for -p).
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noipa))

static long leaf_calls;
static long middle_calls;

NOINLINE static long leaf_work(long n) {
  leaf_calls++;
  __asm__ volatile("" ::: "memory");
  return n * 3;
}

NOINLINE static long middle_step(long n) {
  middle_calls++;
  return leaf_work(n) + 1;
}

int main(int argc, char **argv) {
  long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 3;
  long mallocs = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
  if (argc > 3 && strcmp(argv[3], "wait") == 0) {
    sigset_t usr1;
    int signal;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    printf("ready\n");
    fflush(stdout);
    if (sigwait(&usr1, &signal) != 0) return 2;
  }
  long sum = 0;
  for (long r = 0; r < rounds; r++) sum += middle_step(r);
  for (long i = 0; i < mallocs; i++) {
    void *p = malloc(100000 + i);
    if (p == NULL) return 1;
    free(p);
  }
  printf("leaf_work %ld\nmiddle_step %ld\nsum %ld\n", leaf_calls, middle_calls, sum);
  return 0;
}
