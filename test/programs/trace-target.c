/*
 * Target for `upscope trace` tests. It calls probed functions with values derived from a call
 * index, from THREADS threads, then in a forked child, then in an exec'd copy of itself, and
 * prints how many calls it made of each, so a test can compare what the tracer saw.
 * Usage: trace-target CALLS            (main mode)
 *        trace-target exec-child CALLS (what the exec runs)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4

struct item {
  int32_t id;
  uint32_t len;
  char name[16];
};

int lib_add(int a, int b);

static long calls_ints, calls_str, calls_item, calls_lib;
volatile long sink;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* noipa: not inlined, and calls are kept even where GCC could prove them useless. */
__attribute__((noipa)) int32_t f_ints(int8_t a, uint16_t b, int32_t c, int64_t d, uint64_t e) {
  __asm__ volatile("" ::: "memory");
  return c + 1 + (int32_t)(a * 0) + (int32_t)(b * 0) + (int32_t)(d * 0) + (int32_t)(e * 0);
}

__attribute__((noipa)) size_t f_str(const char *s) { return strlen(s); }

__attribute__((noipa)) uint32_t f_item(const struct item *it) { return it->len; }

static void call_all(long i) {
  sink += f_ints((int8_t)(i - 100), (uint16_t)(i * 7), (int32_t)(-i * 3), -(int64_t)i * 10000000000LL,
         (uint64_t)i * 0x1000000001ULL);
  char text[32];
  snprintf(text, sizeof text, "call-%ld", i);
  sink += (long)f_str(text);
  struct item it = {.id = (int32_t)i, .len = (uint32_t)(i * 2 + 1)};
  snprintf(it.name, sizeof it.name, "item%ld", i);
  sink += f_item(&it);
  sink += lib_add((int)i, 1);
  pthread_mutex_lock(&lock);
  calls_ints++;
  calls_str++;
  calls_item++;
  calls_lib++;
  pthread_mutex_unlock(&lock);
}

static long per_thread;

static void *worker(void *arg) {
  long base = (long)arg * 100000;
  for (long i = 0; i < per_thread; i++) call_all(base + i);
  return NULL;
}

static void report(const char *who) {
  printf("%s pid=%d f_ints=%ld f_str=%ld f_item=%ld lib_add=%ld\n", who, getpid(), calls_ints,
         calls_str, calls_item, calls_lib);
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "exec-child") == 0) {
    long n = atol(argv[2]);
    for (long i = 0; i < n; i++) call_all(900000 + i);
    report("exec");
    return 0;
  }
  per_thread = argc > 1 ? atol(argv[1]) : 100;
  pthread_t threads[THREADS];
  for (long t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, worker, (void *)t);
  for (long t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
  report("main");
  pid_t child = fork();
  if (child == 0) {
    calls_ints = calls_str = calls_item = calls_lib = 0;
    for (long i = 0; i < 10; i++) call_all(800000 + i);
    report("fork");
    char count[16];
    snprintf(count, sizeof count, "%d", 5);
    execl("/proc/self/exe", argv[0], "exec-child", count, (char *)NULL);
    return 127;
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
