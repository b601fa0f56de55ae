/*
 * Target for fetching variables by name (DWARF). `handle` takes an int, an unsigned long, a
 * char *, a struct pointer (a nested struct, a char array, an int array and a 2-D array as
 * members), an enum and a bool; `counter_global` is a global. Every value depends on the
 * command line so the compiler cannot fold it, and the target prints what it passes before
 * each call (the truth a test compares the fetched values with).
 * Usage: dwarf-vars CALLS SEED
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum color { RED = -1, GREEN = 5, BLUE = 7 };

struct header {
  unsigned short kind;
  int len;
};

struct request {
  int id;
  struct header hdr;
  char name[16];
  int vals[4];
  long matrix[2][3];
};

typedef unsigned long size_type;

long counter_global;
volatile long sink;

__attribute__((noinline)) long handle(int n, size_type size, char *label, struct request *req,
                                      enum color c, bool flag) {
  long total = n + (long)size + req->hdr.len + req->vals[2] + c + flag;
  counter_global += total;
  __asm__ volatile("" ::: "memory");
  return total + (long)strlen(label) + req->matrix[1][2];
}

int main(int argc, char **argv) {
  int calls = argc > 1 ? atoi(argv[1]) : 1;
  int seed = argc > 2 ? atoi(argv[2]) : 3;
  for (int i = 0; i < calls; i++) {
    struct request req;
    memset(&req, 0, sizeof req);
    req.id = seed * 10 + i;
    req.hdr.kind = (unsigned short)(2 + i);
    req.hdr.len = seed * 100 + i;
    snprintf(req.name, sizeof req.name, "req-%d", seed + i);
    for (int k = 0; k < 4; k++) req.vals[k] = seed * k + i;
    for (int k = 0; k < 6; k++) req.matrix[k / 3][k % 3] = 1000L * seed + k + i;
    char label[32];
    snprintf(label, sizeof label, "label-%d", seed * 7 + i);
    int n = -(seed + i);
    size_type size = 4096UL * (unsigned long)(seed + i) + 0x100000000UL;
    enum color c = (i + seed) % 2 ? BLUE : RED;
    bool flag = (i + seed) % 3 == 0;
    counter_global = 1000L * seed + i;
    printf("call n=%d size=%lu label=%s id=%d kind=%u len=%d name=%s vals2=%d m12=%ld c=%d "
           "flag=%d counter=%ld\n",
           n, size, label, req.id, req.hdr.kind, req.hdr.len, req.name, req.vals[2],
           req.matrix[1][2], (int)c, (int)flag, counter_global);
    fflush(stdout);
    sink = handle(n, size, label, &req, c, flag);
  }
  return 0;
}
