/*
 * Target for loss accounting: waits for SIGUSR1 (sent once the tracer is attached), calls
 * burst_call() N times (argv[1]) as fast as it can, prints `calls=N`, then sleeps until
 * killed, so the tracer can compare what it delivered and lost with the kernel's counters.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile long sink;

__attribute__((noipa)) long burst_call(long i) { return i + 1; }

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100000;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigprocmask(SIG_BLOCK, &set, NULL);
  printf("ready\n");
  fflush(stdout);
  int sig;
  sigwait(&set, &sig);
  for (long i = 0; i < n; i++) sink += burst_call(i);
  printf("calls=%ld\n", n);
  fflush(stdout);
  for (;;) pause();
}
