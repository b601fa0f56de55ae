/*
 * Target for which processes get a -p run's breakpoints: prints "ready PID", waits until the
 * file GO exists, then forks K children one after the other (each waited for); each child
 * waits 1 s (more than a tracer takes to see it, on a loaded machine), calls scope_work() N times and prints
 * `pid=P calls=N`, its own count (the truth).
 *
 *   scope-forks GO K N
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) long scope_work(long i) {
  sink += i;
  return i * 2;
}

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("ready %d\n", (int)getpid());
  while (access(argv[1], F_OK) != 0) usleep(10000);
  long children = atol(argv[2]);
  long calls = atol(argv[3]);
  for (long k = 0; k < children; k++) {
    pid_t child = fork();
    if (child == 0) {
      usleep(1000000);
      long made = 0;
      for (long i = 0; i < calls; i++, made++) scope_work(i);
      printf("pid=%d calls=%ld\n", (int)getpid(), made);
      return 0;
    }
    if (child > 0) waitpid(child, NULL, 0);
  }
  printf("done\n");
  return 0;
}
