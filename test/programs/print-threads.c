// Four threads call tick() N times each and print a line now and then while traced, then the
// main thread prints its account (one line) and exits with status 3: a command whose own
// output must not get into upscope's machine-readable output, and whose status is its own.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int iterations = 200;
static volatile long total;

__attribute__((noinline)) long tick(long i) {
  __atomic_add_fetch(&total, 1, __ATOMIC_RELAXED);
  return i;
}

__attribute__((noinline)) long never_called(long i) { return i + 1; }

static void *worker(void *arg) {
  long id = (long)arg;
  for (long i = 0; i < iterations; i++) {
    tick(i);
    if (i % 50 == 0) printf("thread %ld at %ld: a line of the command's own output\n", id, i);
    if (i % 20 == 0) usleep(1000);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 1) iterations = atoi(argv[1]);
  setvbuf(stdout, NULL, _IONBF, 0);
  pthread_t threads[4];
  for (long t = 0; t < 4; t++) pthread_create(&threads[t], NULL, worker, (void *)t);
  for (int t = 0; t < 4; t++) pthread_join(threads[t], NULL);
  printf("{\"account\": {\"ticks\": %ld}}\n", total);
  return 3;
}
