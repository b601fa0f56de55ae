/*
 * Target for the bpf engine's tests. It keeps its own account of what it did and prints it as
 * JSON, so that the test compares the kernel's counts and histograms with the truth.
 *
 *   bpf-target hammer N DELAY_MS   after DELAY_MS, 2 threads each call bpf_hit(v) N times
 *                                  (v = i * 7919 % 5000 + thread) and bpf_key(i % 3)
 *   bpf-target spin SECONDS        calls bpf_hit(1) until SECONDS have passed (a bystander)
 *   bpf-target nap DELAY_MS        after DELAY_MS, 2 threads sleep through bpf_nap(us) and
 *                                  bpf_recurse(3, 2100) (calls of 2.1, 4.2 and 6.3 ms, nested)
 *                                  It times each of those calls itself and prints the log2
 *                                  rows (in us) of its own times: a sleep may overrun.
 * SIGUSR1 ends a DELAY_MS wait early (a test sends it once upscope has attached).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) long bpf_hit(long v) {
  __asm__ volatile("");
  return v - 2500;
}

__attribute__((noinline)) int bpf_key(int k) {
  __asm__ volatile("");
  return k;
}

__attribute__((noinline)) void bpf_nap(long us) { usleep(us); }

/* Each timed call's own duration, in log2 rows of microseconds (see row_of). */
static long nap_rows[64], recurse_rows[64];
static pthread_mutex_t rows_lock = PTHREAD_MUTEX_INITIALIZER;

static long now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}

static int row_of(long v);

static void note(long *rows, long since_us) {
  long us = now_us() - since_us;
  pthread_mutex_lock(&rows_lock);
  rows[row_of(us)]++;
  pthread_mutex_unlock(&rows_lock);
}

__attribute__((noinline)) void bpf_recurse(int depth, long us) {
  usleep(us);
  if (depth > 1) {
    long start = now_us();
    bpf_recurse(depth - 1, us);
    note(recurse_rows, start);
  }
  __asm__ volatile("");
}

static void timed_nap(long us) {
  long start = now_us();
  bpf_nap(us);
  note(nap_rows, start);
}

static void print_rows(const char *name, const long *rows) {
  printf("\"%s\":{", name);
  int first = 1;
  for (int r = 0; r < 64; r++) {
    if (rows[r] == 0) continue;
    long low = r < 2 ? r : 1L << (r - 1);
    printf("%s\"%ld\":%ld", first ? "" : ",", low, rows[r]);
    first = 0;
  }
  printf("}");
}

static long n_calls;

struct account {
  long calls, sum, ret_sum, ret_negative, min, max;
  long rows[64]; /* rows[0]: v == 0, rows[1]: v == 1, rows[k]: 2^(k-1) <= v < 2^k */
  long keys[3];
  long linear[11]; /* [500 * i, 500 * (i + 1)), the last from 5000 on */
};

static struct account accounts[2];

static int row_of(long v) {
  if (v < 2) return (int)v;
  int k = 0;
  while ((v >> k) > 1) k++;
  return k + 1;
}

static void *hammer(void *arg) {
  struct account *a = arg;
  int thread = (int)(a - accounts);
  a->min = 1L << 62;
  for (long i = 0; i < n_calls; i++) {
    long v = i * 7919 % 5000 + thread;
    long r = bpf_hit(v);
    a->calls++;
    a->sum += v;
    a->ret_sum += r;
    if (r < 0) a->ret_negative++;
    if (v < a->min) a->min = v;
    if (v > a->max) a->max = v;
    a->rows[row_of(v)]++;
    a->linear[v / 500 < 10 ? v / 500 : 10]++;
    a->keys[bpf_key((int)(i % 3))]++;
  }
  return NULL;
}

static void *napper(void *arg) {
  long thread = (long)arg;
  /* 2.1 ms x2, 4.2 ms x1 or x2, 8.4 ms x1 per thread: 4 x 2.1, 3 x 4.2, 2 x 8.4 ms in all. */
  timed_nap(2100);
  timed_nap(4200);
  timed_nap(2100);
  if (thread == 0) timed_nap(4200);
  timed_nap(8400);
  long start = now_us();
  bpf_recurse(3, 2100);
  note(recurse_rows, start);
  return NULL;
}

static void on_start(int sig) { (void)sig; }

int main(int argc, char **argv) {
  /* A test may end a wait early with SIGUSR1 (once upscope has attached). */
  signal(SIGUSR1, on_start);
  if (argc < 3) {
    fprintf(stderr, "usage: bpf-target hammer N DELAY_MS | spin SECONDS | nap DELAY_MS\n");
    return 2;
  }
  if (strcmp(argv[1], "spin") == 0) {
    time_t end = time(NULL) + atoi(argv[2]);
    long calls = 0;
    while (time(NULL) < end) {
      for (int i = 0; i < 1000; i++) bpf_hit(1);
      calls += 1000;
    }
    printf("{\"calls\":%ld}\n", calls);
    return 0;
  }
  pthread_t threads[2];
  if (strcmp(argv[1], "nap") == 0) {
    usleep(atol(argv[2]) * 1000);
    for (long t = 0; t < 2; t++) pthread_create(&threads[t], NULL, napper, (void *)t);
    for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
    printf("{\"pid\":%d,", getpid());
    print_rows("naps", nap_rows);
    printf(",");
    print_rows("recursions", recurse_rows);
    printf("}\n");
    return 0;
  }
  n_calls = atol(argv[2]);
  if (argc > 3) usleep(atol(argv[3]) * 1000);
  for (int t = 0; t < 2; t++) pthread_create(&threads[t], NULL, hammer, &accounts[t]);
  for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
  struct account all = {0};
  all.min = 1L << 62;
  for (int t = 0; t < 2; t++) {
    struct account *a = &accounts[t];
    all.calls += a->calls;
    all.sum += a->sum;
    all.ret_sum += a->ret_sum;
    all.ret_negative += a->ret_negative;
    if (a->min < all.min) all.min = a->min;
    if (a->max > all.max) all.max = a->max;
    for (int r = 0; r < 64; r++) all.rows[r] += a->rows[r];
    for (int k = 0; k < 3; k++) all.keys[k] += a->keys[k];
    for (int l = 0; l < 11; l++) all.linear[l] += a->linear[l];
  }
  printf("{\"pid\":%d,\"calls\":%ld,\"sum\":%ld,\"retSum\":%ld,\"retNegative\":%ld,\"min\":%ld,\"max\":%ld,",
         getpid(), all.calls, all.sum, all.ret_sum, all.ret_negative, all.min, all.max);
  printf("\"keys\":[%ld,%ld,%ld],\"linear\":[", all.keys[0], all.keys[1], all.keys[2]);
  for (int l = 0; l < 11; l++) printf("%s%ld", l ? "," : "", all.linear[l]);
  printf("],\"rows\":{");
  int first = 1;
  for (int r = 0; r < 64; r++) {
    if (all.rows[r] == 0) continue;
    long low = r < 2 ? r : 1L << (r - 1);
    printf("%s\"%ld\":%ld", first ? "" : ",", low, all.rows[r]);
    first = 0;
  }
  printf("}}\n");
  return 0;
}
