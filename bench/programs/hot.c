// The benchmark target: hot_function() called N times in tight loops (N from argv[1]), split
// over T threads (argv[2], 1 by default), as fast as they go, or at about R calls a second in
// all (argv[3], 0 by default: unpaced), each thread checking the clock every 256 calls and
// waiting while it is ahead. The program times its loops and prints
// `calls=N ns_per_call=F` (F = loop wall time / N, so with T threads, events/s = 1e9 / F); a
// probe's cost per hit is the difference between a probed run and a bare one. The line goes
// to stderr, so that a tracer's stdout can go to /dev/null or a file without losing it.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

// The empty asm claims to clobber %rbx, a callee-saved register, so the function starts with
// `push %rbx`, an instruction the kernel emulates on a uprobe hit, as it does the `push %rbp`
// that begins most functions built with frame pointers. Without it gcc -O2 starts with `lea`,
// which the kernel must single-step out of line, a trap more per hit.
__attribute__((noinline, noipa)) int hot_function(int x) {
  __asm__ volatile("" ::: "rbx");
  return x + 1;
}

#define MAX_THREADS 64

static long per_thread;
static double ns_per_call_paced;  // per thread; 0: unpaced
static int results[MAX_THREADS];

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void *loop(void *arg) {
  int x = 0;
  if (ns_per_call_paced > 0) {
    double start = now_ns();
    for (long i = 0; i < per_thread; i++) {
      if ((i & 255) == 0) {
        while (now_ns() - start < (double)i * ns_per_call_paced) {
        }
      }
      x = hot_function(x);
    }
  } else {
    for (long i = 0; i < per_thread; i++) x = hot_function(x);
  }
  // x depends on every call, so none can be optimised away; storing it keeps it live.
  results[(long)arg] = x;
  return NULL;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? strtol(argv[1], NULL, 10) : 1000000;
  long threads = argc > 2 ? strtol(argv[2], NULL, 10) : 1;
  if (threads < 1 || threads > MAX_THREADS) {
    fprintf(stderr, "hot: threads must be 1 to %d\n", MAX_THREADS);
    return 2;
  }
  double rate = argc > 3 ? strtod(argv[3], NULL) : 0;
  per_thread = n / threads;
  if (rate > 0) ns_per_call_paced = 1e9 / (rate / (double)threads);
  pthread_t ids[MAX_THREADS];
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  if (threads == 1) {
    loop(0);
  } else {
    for (long t = 0; t < threads; t++) pthread_create(&ids[t], NULL, loop, (void *)t);
    for (long t = 0; t < threads; t++) pthread_join(ids[t], NULL);
  }
  clock_gettime(CLOCK_MONOTONIC, &end);
  long calls = per_thread * threads;
  long sum = 0;
  for (long t = 0; t < threads; t++) sum += results[t];
  double ns = (double)(end.tv_sec - start.tv_sec) * 1e9 + (double)(end.tv_nsec - start.tv_nsec);
  fprintf(stderr, "calls=%ld ns_per_call=%.2f x=%ld\n", calls, calls > 0 ? ns / (double)calls : 0.0,
          sum);
  return 0;
}
