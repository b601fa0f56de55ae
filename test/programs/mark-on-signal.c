// A target that calls marker() once for each SIGUSR1 it gets, and nothing else that is
// probed: `mark-on-signal` prints `ready`, then `marked N` after the N-th call, until SIGTERM.
#include <signal.h>
#include <stdio.h>
#include <time.h>

static volatile sig_atomic_t pending;
static volatile sig_atomic_t done;
static long marks;

__attribute__((noipa)) long marker(long n) {
  __asm__ volatile("" ::: "memory");
  return n + 1;
}

static void on_usr1(int sig) {
  (void)sig;
  pending++;
}

static void on_term(int sig) {
  (void)sig;
  done = 1;
}

int main(void) {
  signal(SIGUSR1, on_usr1);
  signal(SIGTERM, on_term);
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("ready\n");
  struct timespec ms = {0, 1000000L};
  while (!done) {
    while (pending > 0) {
      pending--;
      marks = marker(marks);
      printf("marked %ld\n", marks);
    }
    nanosleep(&ms, NULL);
  }
  return 0;
}
