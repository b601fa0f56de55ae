/*
 * The truth for `upscope leaks`: four threads allocate through malloc, calloc and realloc,
 * free most blocks (some in another thread than the one that allocated them), and leak a
 * known number of blocks of known sizes from three call paths. The target counts what it
 * leaks itself and writes it to the file given as its first argument:
 *   <path> <blocks> <bytes>   (one line per path: leak_path_a, leak_path_b, leak_path_c)
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#define ROUNDS 300

static atomic_long leaked_blocks[3];
static atomic_long leaked_bytes[3];
/* Blocks handed from the workers to main, which frees them (another thread). */
static void *handed[THREADS][ROUNDS];

__attribute__((noinline)) static void *leak_path_a(size_t size) {
  void *p = malloc(size);
  memset(p, 1, size);
  return p;
}

__attribute__((noinline)) static void *leak_path_b(size_t n, size_t size) {
  return calloc(n, size);
}

__attribute__((noinline)) static void *grow_start(void) { return malloc(16); }

__attribute__((noinline)) static void *leak_path_c(size_t size) {
  void *p = grow_start();
  return realloc(p, size);
}

__attribute__((noinline)) static void *scratch(size_t size) { return malloc(size); }

static void leak(int path, size_t bytes) {
  atomic_fetch_add(&leaked_blocks[path], 1);
  atomic_fetch_add(&leaked_bytes[path], (long)bytes);
}

static void *worker(void *arg) {
  long t = (long)arg;
  for (int i = 0; i < ROUNDS; i++) {
    size_t a = 100 + (size_t)(t * 7 + i % 13);
    void *pa = leak_path_a(a);
    size_t n = (size_t)(i % 4 + 1);
    void *pb = leak_path_b(n, 24);
    size_t c = 64 + (size_t)(i % 29);
    void *pc = leak_path_c(c);
    /* Every 10th block of each path leaks; every 7th of path c's leaks too. */
    if (i % 10 == 0) leak(0, a); else free(pa);
    if (i % 10 == 3) leak(1, n * 24); else free(pb);
    if (i % 10 == 5 || i % 7 == 0) leak(2, c); else handed[t][i] = pc;
    /* Short-lived scratch, freed here. */
    free(scratch(32 + (size_t)i));
    free(NULL);
  }
  return NULL;
}

int main(int argc, char **argv) {
  pthread_t threads[THREADS];
  for (long t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, worker, (void *)t);
  for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
  for (int t = 0; t < THREADS; t++)
    for (int i = 0; i < ROUNDS; i++) free(handed[t][i]);
  FILE *out = fopen(argc > 1 ? argv[1] : "/dev/stdout", "w");
  const char *names[3] = {"leak_path_a", "leak_path_b", "leak_path_c"};
  for (int p = 0; p < 3; p++)
    fprintf(out, "%s %ld %ld\n", names[p], atomic_load(&leaked_blocks[p]), atomic_load(&leaked_bytes[p]));
  fclose(out);
  return 0;
}
