/*
 * Target for the tests of tracers side by side: it calls co_work() (and co_leaf() from it) in
 * phases a test asks for on stdin, and counts the calls it made (the truth the tracers' counts
 * are checked against).
 *
 *   coexist-target [THREADS]
 *
 * Prints "ready PID". Then reads commands, one a line:
 *   run N     make N calls of co_work() (split over THREADS threads), then print "done TOTAL"
 *   spin      call co_work() without pause in THREADS threads until "stop"
 *   stop      end a spin, print "done TOTAL"
 *   quit      print "total TOTAL" and exit 0
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_long calls;
static atomic_int spinning;
static int threads = 1;

__attribute__((noipa)) long co_leaf(long x) { return x * 3 + 1; }

__attribute__((noipa)) long co_work(long x) {
  atomic_fetch_add(&calls, 1);
  return co_leaf(x) + 1;
}

struct batch {
  long n;
  long sum;
};

static void *run_batch(void *arg) {
  struct batch *b = arg;
  for (long i = 0; i < b->n; i++) b->sum += co_work(i);
  return NULL;
}

static void *spin(void *arg) {
  long *sum = arg;
  for (long i = 0; atomic_load(&spinning); i++) *sum += co_work(i);
  return NULL;
}

int main(int argc, char **argv) {
  threads = argc > 1 ? atoi(argv[1]) : 1;
  if (threads < 1 || threads > 64) threads = 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("ready %d\n", (int)getpid());
  char line[128];
  pthread_t ids[64];
  long sums[64];
  while (fgets(line, sizeof line, stdin) != NULL) {
    if (strncmp(line, "run ", 4) == 0) {
      long n = atol(line + 4);
      struct batch batches[64];
      for (int t = 0; t < threads; t++) {
        batches[t].n = n / threads + (t < n % threads ? 1 : 0);
        batches[t].sum = 0;
        pthread_create(&ids[t], NULL, run_batch, &batches[t]);
      }
      for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
      printf("done %ld\n", atomic_load(&calls));
    } else if (strncmp(line, "spin", 4) == 0) {
      atomic_store(&spinning, 1);
      for (int t = 0; t < threads; t++) pthread_create(&ids[t], NULL, spin, &sums[t]);
    } else if (strncmp(line, "stop", 4) == 0) {
      atomic_store(&spinning, 0);
      for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
      printf("done %ld\n", atomic_load(&calls));
    } else if (strncmp(line, "quit", 4) == 0) {
      break;
    }
  }
  printf("total %ld\n", atomic_load(&calls));
  return 0;
}
