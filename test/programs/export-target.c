// A target for the exporters' tests: waits for SIGUSR1, then calls work(i % 3) N times and
// other() M times, keeping its own counts, prints them, and waits for SIGTERM. With a third
// argument `now` it starts at once and exits at the end.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile sig_atomic_t go;
static long per_kind[3];
static long others;

static void on_usr1(int sig) { (void)sig; go = 1; }

__attribute__((noinline)) long work(long kind) {
  per_kind[kind]++;
  __asm__ volatile("" ::: "memory");
  return kind * 2;
}

__attribute__((noinline)) long other(long x) {
  others++;
  __asm__ volatile("" ::: "memory");
  return x + 1;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100;
  long m = argc > 2 ? atol(argv[2]) : 10;
  int now = argc > 3;
  go = now;
  signal(SIGUSR1, on_usr1);
  printf("waiting\n");
  fflush(stdout);
  while (!go) pause();
  long sum = 0;
  for (long i = 0; i < n; i++) sum += work(i % 3);
  for (long i = 0; i < m; i++) sum += other(i);
  printf("done work0=%ld work1=%ld work2=%ld other=%ld sum=%ld\n", per_kind[0], per_kind[1],
         per_kind[2], others, sum);
  fflush(stdout);
  if (now) return 0;
  for (;;) pause();
}
