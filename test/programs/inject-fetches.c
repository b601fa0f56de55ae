// Target for the inject engine's memory and string fetches: calls greet(name, rec, ok)
// CALLS times (argv[1]) from THREADS threads (argv[2], default 1), each thread its own
// numbers i = thread * CALLS + n, then prints "calls N sum S". With STOP (argv[3]) it prints
// "ready PID" and each thread calls its numbers again and again until the file STOP exists,
// then it prints "thread K rounds R" for each thread before its totals. For call i:
// - i % 10 == 0: name is NULL and rec points into pages that cannot be read (ok = 0);
// - i % 10 == 5: name is 3 bytes ("xyz") at the end of a page the next of which cannot be
//   read, with no NUL before it (ok = 0, rec unreadable too);
// - i % 10 == 3: name is 300 'x's;
// - else name is "call-I".
// When ok, rec is {id = i, label = "label-(i % 7)", small = -i}. greet reads rec only when
// ok and returns id * 2 + 1 (7 when not ok); each call also asks label_of(i) (below), which
// adds 1 when it is not NULL: the sum is of those.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct rec {
  long id;
  const char *label;
  int small;
};

static const char *labels[7] = {"label-0", "label-1", "label-2", "label-3",
                                "label-4", "label-5", "label-6"};
static char *gone;    // two pages that cannot be read
static char *edge;    // "xyz" at the end of a page whose next page cannot be read
static char longname[301];
static long calls;

__attribute__((noinline)) long greet(const char *name, const struct rec *r, int ok) {
  __asm__ volatile("" ::"r"(name) : "memory");
  if (!ok) return 7;
  return r->id * 2 + 1;
}

// The label of call i: NULL when i % 10 == 0, `edge` (no NUL before a page that cannot be
// read) when i % 10 == 5, else labels[i % 7].
__attribute__((noinline)) const char *label_of(long i) {
  if (i % 10 == 0) return NULL;
  if (i % 10 == 5) return edge;
  return labels[i % 7];
}

struct work {
  long first;
  long count;
  long sum;
  long rounds;
};

static const char *stop;

static void *run(void *arg) {
  struct work *w = arg;
  char name[32];
  struct rec rec;
  for (long n = 0; n < w->count; n++) {
    long i = w->first + n;
    const char *p = name;
    const struct rec *r = &rec;
    int ok = 1;
    if (i % 10 == 0) {
      p = NULL;
      r = (const struct rec *)(gone + 4096);
      ok = 0;
    } else if (i % 10 == 5) {
      p = edge;
      r = (const struct rec *)(gone + 4096);
      ok = 0;
    } else if (i % 10 == 3) {
      p = longname;
    } else {
      snprintf(name, sizeof name, "call-%ld", i);
    }
    rec.id = i;
    rec.label = labels[i % 7];
    rec.small = (int)-i;
    w->sum += greet(p, r, ok) + (label_of(i) != NULL);
    if (n == w->count - 1) {
      w->rounds++;
      if (stop != NULL && access(stop, F_OK) != 0) n = -1;
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  long count = argc > 1 ? atol(argv[1]) : 1000;
  int threads = argc > 2 ? atoi(argv[2]) : 1;
  stop = argc > 3 ? argv[3] : NULL;
  memset(longname, 'x', 300);
  // Pages that cannot be read, kept reserved (an unmapped range may be a thread's stack next).
  gone = mmap(NULL, 2 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *two = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  mprotect(two + 4096, 4096, PROT_NONE);
  edge = two + 4096 - 3;
  memcpy(edge, "xyz", 3);
  if (stop != NULL) {
    printf("ready %d\n", getpid());
    fflush(stdout);
  }
  pthread_t t[64];
  struct work w[64];
  for (int k = 0; k < threads && k < 64; k++) {
    w[k] = (struct work){.first = k * count, .count = count, .sum = 0, .rounds = 0};
    pthread_create(&t[k], NULL, run, &w[k]);
  }
  long sum = 0;
  long rounds = 0;
  for (int k = 0; k < threads && k < 64; k++) {
    pthread_join(t[k], NULL);
    sum += w[k].sum;
    rounds += w[k].rounds;
    if (stop != NULL) printf("thread %d rounds %ld\n", k, w[k].rounds);
  }
  calls = rounds * count;
  printf("calls %ld sum %ld\n", calls, sum);
  return 0;
}
