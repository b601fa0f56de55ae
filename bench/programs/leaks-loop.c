// The leaks benchmark's target: N malloc+free pairs (sizes 16 to 527 bytes) in loop_pairs(),
// paced at RATE pairs/s (0: as fast as it can), keeping every LEAK-th block (never freed).
//   leaks-loop N RATE LEAK [GO_FILE]
// With GO_FILE it waits for that file to exist before its loop (a tracer attached by -p is
// ready then), and waits 2 s after it (the tracer reads what is outstanding). It times its
// loop and prints `pairs=N ns_per_pair=F leaked=K leaked_bytes=B` to stderr.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *kept[1 << 20];

__attribute__((noinline)) static long loop_pairs(long n, double rate, long leak, long *bytes) {
  long leaked = 0;
  double start = now_ns();
  for (long i = 0; i < n; i++) {
    size_t size = 16 + (size_t)(i * 7 % 512);
    void *p = malloc(size);
    __asm__ volatile("" : : "r"(p) : "memory");
    if (leak > 0 && i % leak == 0 && leaked < (long)(sizeof kept / sizeof kept[0])) {
      kept[leaked++] = p;
      *bytes += (long)size;
    } else {
      free(p);
    }
    // Paced: every 1,000 pairs, wait for the schedule (never ahead of RATE).
    if (rate > 0 && i % 1000 == 999) {
      while (now_ns() - start < (i + 1) * 1e9 / rate) {
      }
    }
  }
  return leaked;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  double rate = argc > 2 ? atof(argv[2]) : 0;
  long leak = argc > 3 ? atol(argv[3]) : 0;
  const char *go = argc > 4 ? argv[4] : NULL;
  if (go != NULL)
    while (access(go, F_OK) != 0) usleep(1000);
  long bytes = 0;
  double start = now_ns();
  long leaked = loop_pairs(n, rate, leak, &bytes);
  double ns = now_ns() - start;
  fprintf(stderr, "pairs=%ld ns_per_pair=%.2f leaked=%ld leaked_bytes=%ld\n", n, ns / n, leaked,
          bytes);
  if (go != NULL) sleep(2);
  return 0;
}
