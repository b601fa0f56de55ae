/*
 * A program that loads its library late: it waits until GO exists (checked every 10 ms; "-"
 * waits for nothing), then ROUNDS times dlopen()s LIB, calls late_add N times and late_mul
 * N/2 times, prints what the library counted, and dlclose()s it (unmapping it). With "fork"
 * the rounds run in a forked child, which the parent waits for.
 *
 *   late-target GO LIB N [ROUNDS] [fork]
 *
 * Prints "round R add=A mul=M" per round and "total add=A mul=M" at the end.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void wait_for(const char *go) {
  if (strcmp(go, "-") == 0) return;
  for (int i = 0; i < 6000 && access(go, F_OK) != 0; i++) usleep(10000);
}

static int rounds(const char *lib, int n, int count) {
  int total_add = 0, total_mul = 0;
  for (int r = 1; r <= count; r++) {
    void *handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
      fprintf(stderr, "late-target: %s\n", dlerror());
      return 1;
    }
    int (*add)(int, int) = (int (*)(int, int))dlsym(handle, "late_add");
    long (*mul)(long, long) = (long (*)(long, long))dlsym(handle, "late_mul");
    int (*add_calls)(void) = (int (*)(void))dlsym(handle, "late_add_calls");
    int (*mul_calls)(void) = (int (*)(void))dlsym(handle, "late_mul_calls");
    long sum = 0;
    for (int i = 0; i < n; i++) sum += add(i, r);
    for (int i = 0; i < n / 2; i++) sum += mul(i, 2);
    printf("round %d add=%d mul=%d sum=%ld\n", r, add_calls(), mul_calls(), sum);
    total_add += add_calls();
    total_mul += mul_calls();
    dlclose(handle);
  }
  printf("total add=%d mul=%d\n", total_add, total_mul);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: late-target GO LIB N [ROUNDS] [fork]\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("ready %d\n", (int)getpid());
  wait_for(argv[1]);
  int n = atoi(argv[3]);
  int count = argc > 4 ? atoi(argv[4]) : 1;
  if (argc > 5 && strcmp(argv[5], "fork") == 0) {
    pid_t child = fork();
    if (child == 0) _exit(rounds(argv[2], n, count));
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  return rounds(argv[2], n, count);
}
