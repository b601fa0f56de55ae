/*
 * Target for loss accounting at the end of a command: run by a tracer's -c, it stops its
 * parent (the tracer) with SIGSTOP, calls stall_call() N times (argv[1]) as fast as it can,
 * continues the parent and exits at once. The tracer reads nothing while the calls are made,
 * as on a loaded machine, so a small ring buffer overruns before its first read, and all
 * that is left to read is read after the command has ended. Prints `calls=N`, counted here.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile long sink;
long calls;

__attribute__((noipa)) long stall_call(long i) { return i + 1; }

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100000;
  pid_t parent = getppid();
  kill(parent, SIGSTOP);
  for (long i = 0; i < n; i++) {
    sink += stall_call(i);
    calls++;
  }
  kill(parent, SIGCONT);
  printf("calls=%ld\n", calls);
  return 0;
}
