/*
 * Target for the ptrace engine: THREADS threads each call probed_add() CALLS times (argv[1],
 * default 1000); the program counts the calls itself and prints the count and a checksum of
 * the results, so a test can compare hits with calls, and output with and without probes.
 * `ptrace-target gate` asks check_gate() instead: it prints "open" only if it returns 1.
 * `ptrace-target exec` calls probed_add() 3 times, then execs itself with 2 calls per thread.
 * `ptrace-target until FILE`: the threads call probed_add() until FILE exists (the main thread
 * looks every millisecond), then 100,000 times more each; the program prints its count and
 * checksum, and those its threads' own loop counters give (equal when every call ran once and
 * returned right), so a test can end the run as soon as it has seen what it needs.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 4

static atomic_long calls;
static long per_thread;

/* noipa: a real call every time, never inlined or folded. */
__attribute__((noipa)) long probed_add(long a, long b) {
  atomic_fetch_add(&calls, 1);
  return a + b;
}

__attribute__((noipa)) int check_gate(const char *key) { return strcmp(key, "secret") == 0; }

static void *worker(void *arg) {
  long sum = 0;
  for (long i = 0; i < per_thread; i++) sum += probed_add(i, (long)arg);
  return (void *)sum;
}

static atomic_int stopping;
static long loops[THREADS];

static void *until_worker(void *arg) {
  long t = (long)arg;
  long n = 0;
  long sum = 0;
  while (!atomic_load_explicit(&stopping, memory_order_relaxed)) sum += probed_add(n++, t);
  for (long k = 0; k < 100000; k++) sum += probed_add(n++, t);
  loops[t] = n;
  return (void *)sum;
}

static int until(const char *file) {
  pthread_t threads[THREADS];
  for (long t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, until_worker, (void *)t);
  while (access(file, F_OK) != 0) usleep(1000);
  atomic_store(&stopping, 1);
  long checksum = 0;
  long looped = 0;
  long expected = 0;
  for (long t = 0; t < THREADS; t++) {
    void *sum;
    pthread_join(threads[t], &sum);
    checksum += (long)sum;
    looped += loops[t];
    expected += loops[t] * (loops[t] - 1) / 2 + t * loops[t];
  }
  printf("calls=%ld checksum=%ld\n", atomic_load(&calls), checksum);
  printf("loops=%ld expected=%ld\n", looped, expected);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "until") == 0) return until(argv[2]);
  if (argc > 1 && strcmp(argv[1], "exec") == 0) {
    /* Some calls, then the process becomes a new image of itself that makes more. */
    long sum = 0;
    for (long i = 0; i < 3; i++) sum += probed_add(i, 1);
    printf("before exec calls=%ld\n", atomic_load(&calls));
    fflush(stdout);
    execl("/proc/self/exe", argv[0], "2", (char *)NULL);
    return 127;
  }
  if (argc > 1 && strcmp(argv[1], "gate") == 0) {
    puts(check_gate("guess") ? "open" : "closed");
    return 0;
  }
  per_thread = argc > 1 ? atol(argv[1]) : 1000;
  pthread_t threads[THREADS];
  for (long t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, worker, (void *)t);
  long checksum = 0;
  for (long t = 0; t < THREADS; t++) {
    void *sum;
    pthread_join(threads[t], &sum);
    checksum += (long)sum;
  }
  printf("calls=%ld checksum=%ld\n", atomic_load(&calls), checksum);
  return 0;
}
