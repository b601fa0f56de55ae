/*
 * Stacks walked while the memory map is locked: three threads map, protect and unmap
 * anonymous memory in a tight loop (each call takes the process's mmap lock for writing),
 * while one thread allocates from eight call paths, each on a code page of its own, and
 * leaks a known number of blocks of known sizes from each. Each path also calls
 * churn_leaf() once per round (for `count --by ustack`).
 *
 *   leaks-churn TRUTH [ROUNDS]   writes "<path> <blocks> <bytes> <calls>" per path to TRUTH
 *                                when done, then prints {"calls":N} (churn_leaf's calls)
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CHURNERS 3
#define PATHS 8

static atomic_int done;
static long leaked_blocks[PATHS];
static long leaked_bytes[PATHS];
static long calls[PATHS];
static long rounds = 2000;

static void *churn(void *arg) {
  (void)arg;
  while (!atomic_load(&done)) {
    char *p = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) continue;
    p[0] = 1;
    mprotect(p, 4096, PROT_READ);
    mprotect(p, 4096, PROT_READ | PROT_WRITE);
    munmap(p, 1 << 16);
  }
  return NULL;
}

__attribute__((noinline)) long churn_leaf(long v) {
  __asm__ volatile("");
  return v + 1;
}

/* One path: its own code page (aligned), a leaf call, an allocation, a leak every 5th. */
#define PATH(n)                                                                          \
  __attribute__((noinline, aligned(4096))) void *churn_path_##n(long i) {                \
    calls[n] += churn_leaf(i) - i;                                                        \
    size_t size = 40 + n * 8 + (size_t)(i % 5);                                           \
    void *p = (n % 2) ? calloc(1, size) : malloc(size);                                   \
    __asm__ volatile("" : : "r"(p) : "memory");                                           \
    return p;                                                                             \
  }
PATH(0)
PATH(1)
PATH(2)
PATH(3)
PATH(4)
PATH(5)
PATH(6)
PATH(7)

static void *(*const paths[PATHS])(long) = {churn_path_0, churn_path_1, churn_path_2,
                                            churn_path_3, churn_path_4, churn_path_5,
                                            churn_path_6, churn_path_7};

static void *allocate(void *arg) {
  (void)arg;
  for (long i = 0; i < rounds; i++) {
    for (int n = 0; n < PATHS; n++) {
      size_t size = 40 + (size_t)n * 8 + (size_t)(i % 5);
      void *p = paths[n](i);
      if (i % 5 == n % 5) {
        leaked_blocks[n]++;
        leaked_bytes[n] += (long)size;
      } else {
        free(p);
      }
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 2) rounds = atol(argv[2]);
  pthread_t churners[CHURNERS], allocator;
  for (int t = 0; t < CHURNERS; t++) pthread_create(&churners[t], NULL, churn, NULL);
  pthread_create(&allocator, NULL, allocate, NULL);
  pthread_join(allocator, NULL);
  atomic_store(&done, 1);
  for (int t = 0; t < CHURNERS; t++) pthread_join(churners[t], NULL);
  FILE *out = fopen(argc > 1 ? argv[1] : "/dev/stdout", "w");
  long total = 0;
  for (int n = 0; n < PATHS; n++) {
    fprintf(out, "churn_path_%d %ld %ld %ld\n", n, leaked_blocks[n], leaked_bytes[n], calls[n]);
    total += calls[n];
  }
  fclose(out);
  printf("{\"calls\":%ld}\n", total);
  fflush(stdout);
  return 0;
}
