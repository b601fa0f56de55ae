/*
 * Flood target: calls flood_call() as fast as it can for SECONDS (argv[1]) once it gets
 * SIGUSR1 (sent when the tracer is attached), then writes the number of calls to the file
 * argv[2]. That count is the truth a tracer's delivered + lost must add up to.
 * With argv[3] = "paced", it calls 20,000 times a second instead (a busy service, for a soak).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile long sink;

__attribute__((noipa)) long flood_call(long i) { return i + 1; }

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 1;
  const char *out = argc > 2 ? argv[2] : "/dev/stderr";
  int paced = argc > 3 && strcmp(argv[3], "paced") == 0;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigprocmask(SIG_BLOCK, &set, NULL);
  int sig;
  sigwait(&set, &sig);
  long calls = 0;
  double end = now() + seconds;
  while (now() < end) {
    for (int i = 0; i < (paced ? 20 : 4096); i++) sink += flood_call(calls++);
    if (paced) usleep(1000);
  }
  FILE *f = fopen(out, "w");
  if (f == NULL) return 1;
  fprintf(f, "%ld\n", calls);
  fclose(f);
  return 0;
}
