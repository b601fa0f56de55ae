/*
 * Target for which processes a run covers, with its own count of every call:
 *   procs-target forks K N   calls procs_work() N times, then forks K children that call it N
 *                            times each (one after the other, each waited for); every process
 *                            prints `pid=P calls=N` when done
 *   procs-target args N      calls procs_work(size) N times, size 200001 every third call and
 *                            other sizes between, and prints `calls=N wanted=W` (W: the calls
 *                            with 200001)
 * procs_work() calls procs_leaf() with another first argument, so that the argument register
 * holds another value when procs_work() returns.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) long procs_leaf(long value) {
  sink += value;
  return value * 3;
}

__attribute__((noinline)) long procs_work(long size) {
  long result = procs_leaf(size + 7);
  sink += result;
  return result;
}

static long run(long calls, long *wanted) {
  for (long i = 0; i < calls; i++) {
    long size = i % 3 == 0 ? 200001 : 100 + i;
    if (size == 200001 && wanted != NULL) (*wanted)++;
    procs_work(size);
  }
  return calls;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 4 && strcmp(argv[1], "forks") == 0) {
    long children = atol(argv[2]);
    long calls = atol(argv[3]);
    run(calls, NULL);
    for (long i = 0; i < children; i++) {
      pid_t child = fork();
      if (child == 0) {
        run(calls, NULL);
        printf("pid=%d calls=%ld\n", (int)getpid(), calls);
        return 0;
      }
      if (child > 0) waitpid(child, NULL, 0);
    }
    printf("pid=%d calls=%ld\n", (int)getpid(), calls);
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "args") == 0) {
    long wanted = 0;
    long calls = run(atol(argv[2]), &wanted);
    printf("calls=%ld wanted=%ld\n", calls, wanted);
    return 0;
  }
  fprintf(stderr, "usage: procs-target forks K N | args N\n");
  return 2;
}
