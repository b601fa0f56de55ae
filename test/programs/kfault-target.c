/*
 * Target for the kernel engines' fault tests. It calls kf_tick(PHASE) every SLEEP_US
 * microseconds and counts its own calls; the argument says who made the call, so a test can
 * match a trace's events with the program's own counts:
 *   1  before the file GO exists (a tracer may attach meanwhile: seen in part), every 1 ms,
 *   2  the process's CALLS calls once GO exists,
 *   3  forkexec: a forked child's CALLS calls, after which the child execs this program,
 *   4  an exec'd image's CALLS calls (forkexec: the child's, then the parent's own image).
 *
 *   kfault-target MODE CALLS SLEEP_US GO     MODE: plain | forkexec
 *   kfault-target image CALLS SLEEP_US       (what an exec runs)
 *
 * Prints "ready" once looping, then "parent waiting=W calls=C", "child calls=C" and
 * "image calls=C" as each part ends; exits 0, or 1 when the child did not end with status 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

volatile long sink;

__attribute__((noipa)) long kf_tick(long phase) {
  __asm__ volatile("" ::: "memory");
  return phase * 3 + 1;
}

static long run(long phase, long calls, long sleep_us) {
  long made = 0;
  for (long i = 0; i < calls; i++) {
    sink += kf_tick(phase);
    made++;
    if (sleep_us > 0) usleep((useconds_t)sleep_us);
  }
  return made;
}

static void become_image(const char *self, long calls, long sleep_us) {
  char calls_text[32], sleep_text[32];
  snprintf(calls_text, sizeof calls_text, "%ld", calls);
  snprintf(sleep_text, sizeof sleep_text, "%ld", sleep_us);
  fflush(stdout);
  execl("/proc/self/exe", self, "image", calls_text, sleep_text, (char *)NULL);
  perror("kfault-target: exec");
  _exit(127);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 4 && strcmp(argv[1], "image") == 0) {
    long made = run(4, atol(argv[2]), atol(argv[3]));
    printf("image calls=%ld\n", made);
    return 0;
  }
  if (argc != 5) {
    fprintf(stderr, "usage: kfault-target plain|forkexec CALLS SLEEP_US GO\n");
    return 2;
  }
  const char *mode = argv[1];
  long calls = atol(argv[2]);
  long sleep_us = atol(argv[3]);
  const char *go = argv[4];
  printf("ready\n");
  long waiting = 0;
  while (access(go, F_OK) != 0) waiting += run(1, 1, 1000);
  long made = run(2, calls, sleep_us);
  printf("parent waiting=%ld calls=%ld\n", waiting, made);
  if (strcmp(mode, "forkexec") != 0) return 0;
  pid_t child = fork();
  if (child < 0) {
    perror("kfault-target: fork");
    return 1;
  }
  if (child == 0) {
    long own = run(3, calls, sleep_us);
    printf("child calls=%ld\n", own);
    become_image(argv[0], calls, sleep_us);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    printf("child failed\n");
    return 1;
  }
  become_image(argv[0], calls, sleep_us);
}
