// A target for return probes on the inject engine: THREADS threads each recurse DEPTH deep
// (rec), leave deep call chains by longjmp and by returning (deep), and call a leaf (work)
// CALLS times; every function counts its calls and its returns itself, and a checksum of
// what they returned shows that the program computes the same traced or not.
//   inject-returns THREADS CALLS DEPTH [DELAY_MS]
//   inject-returns THREADS CALLS DEPTH DELAY_MS 0
// DELAY_MS: sleep before the calls (to attach with -p first). With 0 after it, each thread
// repeats its calls until SIGUSR1, checks that every round computes what its first did, and
// `rounds N mismatches M` is printed too.
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static atomic_long rec_calls, rec_returns, deep_calls, deep_returns, work_calls, work_returns;
static atomic_long checksum, jumps;
static long calls, depth;
static int forever;
static volatile sig_atomic_t stop;
static atomic_long rounds, mismatches;

static void on_usr1(int sig) {
  (void)sig;
  stop = 1;
}
static __thread jmp_buf env;

__attribute__((noinline)) long rec(long n) {
  atomic_fetch_add_explicit(&rec_calls, 1, memory_order_relaxed);
  long r = n <= 0 ? 0 : rec(n - 1) + 1;
  atomic_fetch_add_explicit(&rec_returns, 1, memory_order_relaxed);
  return r;
}

// Ten calls deep, then (jump) a longjmp out of all of them back to leave().
__attribute__((noinline)) long deep(long n, int jump) {
  atomic_fetch_add_explicit(&deep_calls, 1, memory_order_relaxed);
  if (n == 0) {
    if (jump) longjmp(env, 1);
    atomic_fetch_add_explicit(&deep_returns, 1, memory_order_relaxed);
    return 7;
  }
  long r = deep(n - 1, jump) * 3 % 1000003;
  atomic_fetch_add_explicit(&deep_returns, 1, memory_order_relaxed);
  return r;
}

__attribute__((noinline)) long leave(long i) {
  if (setjmp(env) != 0) {
    atomic_fetch_add_explicit(&jumps, 1, memory_order_relaxed);
    return -1;
  }
  return deep(10, (int)(i & 1));
}

__attribute__((noinline)) long work(long i) {
  atomic_fetch_add_explicit(&work_calls, 1, memory_order_relaxed);
  long r = i * 2 + 1;
  atomic_fetch_add_explicit(&work_returns, 1, memory_order_relaxed);
  return r;
}

static long round_of(long id) {
  long sum = rec(depth);
  for (long i = 0; i < calls; i++) {
    sum += work(i + id);
    if (i % 100 == 0) sum += leave(i / 100);
  }
  return sum + rec(depth);
}

static void *run(void *arg) {
  long id = (long)arg;
  long first = round_of(id);
  atomic_fetch_add_explicit(&checksum, first, memory_order_relaxed);
  atomic_fetch_add_explicit(&rounds, 1, memory_order_relaxed);
  while (forever && !stop) {
    if (round_of(id) != first) atomic_fetch_add_explicit(&mismatches, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&rounds, 1, memory_order_relaxed);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s THREADS CALLS DEPTH [DELAY_MS]\n", argv[0]);
    return 2;
  }
  int threads = atoi(argv[1]);
  calls = atol(argv[2]);
  depth = atol(argv[3]);
  forever = argc > 5 && atol(argv[5]) == 0;
  signal(SIGUSR1, on_usr1);
  if (argc > 4) {
    long ms = atol(argv[4]);
    struct timespec delay = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&delay, NULL);
  }
  pthread_t tids[64];
  for (long i = 0; i < threads && i < 64; i++) pthread_create(&tids[i], NULL, run, (void *)i);
  for (long i = 0; i < threads && i < 64; i++) pthread_join(tids[i], NULL);
  if (forever) printf("rounds %ld mismatches %ld\n", rounds, mismatches);
  printf("rec %ld %ld deep %ld %ld work %ld %ld jumps %ld checksum %ld\n", rec_calls, rec_returns,
         deep_calls, deep_returns, work_calls, work_returns, jumps, checksum);
  return 0;
}
