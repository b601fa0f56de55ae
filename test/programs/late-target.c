/*
 * A program that loads its library late: it waits until GO exists (checked every 10 ms; "-"
 * waits for nothing), then ROUNDS times dlopen()s LIB, calls late_add N times and late_mul
 * N/2 times, prints what the library counted, and dlclose()s it (unmapping it). Options:
 * "fork": the rounds run in a forked child, which the parent waits for; "each": after each
 * round's dlclose() it prints "closed R" and waits until GO.R+1 exists before the next
 * dlopen() (a test replaces LIB meanwhile); "hold": before each round's dlclose() it prints
 * "opened R" and waits until GO.close.R exists; "swap=FILE": after each round's dlclose() it puts
 * a copy of FILE in LIB's place (a new file renamed over it) and goes on at once.
 *
 *   late-target GO LIB N [ROUNDS] [fork|each|hold|swap=FILE]...
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

static const char *go_file;
static int each;
static int hold;
static const char *swap_from;

/* Put a copy of `from` in `to`'s place: written under another name, then renamed over it. */
static int replace_file(const char *from, const char *to) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.new", to);
  FILE *in = fopen(from, "rb");
  FILE *out = fopen(tmp, "wb");
  if (in == NULL || out == NULL) return -1;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
  fclose(in);
  if (fclose(out) != 0) return -1;
  return rename(tmp, to);
}

/* Between rounds: wait for GO.R+1 ("each"), or replace the library ("swap=FILE"). */
static int between(const char *lib, int r) {
  if (each) {
    char go[4096];
    printf("closed %d\n", r);
    snprintf(go, sizeof go, "%s.%d", go_file, r + 1);
    wait_for(go);
  }
  if (swap_from != NULL && replace_file(swap_from, lib) != 0) {
    perror("late-target: replace");
    return 1;
  }
  return 0;
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
    if (hold) {
      char go[4096];
      printf("opened %d\n", r);
      snprintf(go, sizeof go, "%s.close.%d", go_file, r);
      wait_for(go);
    }
    dlclose(handle);
    if (r < count && between(lib, r) != 0) return 1;
  }
  printf("total add=%d mul=%d\n", total_add, total_mul);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: late-target GO LIB N [ROUNDS] [fork|each|hold|swap=FILE]...\n");
    return 2;
  }
  go_file = argv[1];
  int forked = 0;
  for (int i = 5; i < argc; i++) {
    if (strcmp(argv[i], "fork") == 0) forked = 1;
    else if (strcmp(argv[i], "each") == 0) each = 1;
    else if (strcmp(argv[i], "hold") == 0) hold = 1;
    else if (strncmp(argv[i], "swap=", 5) == 0) swap_from = argv[i] + 5;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("ready %d\n", (int)getpid());
  wait_for(argv[1]);
  int n = atoi(argv[3]);
  int count = argc > 4 ? atoi(argv[4]) : 1;
  if (forked) {
    pid_t child = fork();
    if (child == 0) _exit(rounds(argv[2], n, count));
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  return rounds(argv[2], n, count);
}
