// Functions GCC -O2 copies and splits, for the tests of clone names in C: add becomes
// `add.isra.0` (it reads one field of a struct passed by pointer), scale `scale.constprop.0`
// (always called with factor 3), work a `work.part.0` (its early return is inlined into main,
// the rest called), and check keeps its error path in `check.cold`. Each counts its calls;
// main calls each ROUNDS times (argv[1], default 3) and prints "name count" lines. With argv[2]
// "bad", check is called once more with a negative number, which runs its .cold part.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long counts[5];
enum { ADD, SCALE, WORK_SLOW, CHECK, CHECK_BAD };

struct big {
  long a, b, c, d, e, f;
};

__attribute__((noinline)) static long add(const struct big *big, long n) {
  counts[ADD]++;
  return big->c + n;
}

__attribute__((noinline)) static long scale(long x, long factor) {
  counts[SCALE]++;
  return x * factor + (x >> factor);
}

static long work(long x) {
  if (__builtin_expect(x < 100, 1)) return x;
  counts[WORK_SLOW]++;
  long s = 0;
  for (long i = 0; i < x; i++) {
    s += i * i % 7;
    if (s > 1000000) s /= 3;
  }
  for (long i = 0; i < x; i++) s ^= i * 31 % 11;
  return s;
}

__attribute__((noinline, cold)) static void complain(long x) {
  fprintf(stderr, "check: %ld is negative\n", x);
}

__attribute__((noinline)) long check(long x) {
  counts[CHECK]++;
  if (x < 0) {
    counts[CHECK_BAD]++;
    complain(x);
    return -x * 3 + counts[ADD];
  }
  return x + 1;
}

volatile long sink;

int main(int argc, char **argv) {
  long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 3;
  struct big big = {1, 2, 3, 4, 5, 6};
  long sum = 0;
  for (long r = 0; r < rounds; r++) {
    sum += add(&big, r);
    sum += scale(r, 3) + scale(r + 1, 3);
    sum += work(r * 50) + work(r * 70 + 1);
    sum += check(r);
  }
  if (argc > 2 && strcmp(argv[2], "bad") == 0) sum += check(-1);
  sink = sum;
  static const char *const names[] = {"add", "scale", "work_slow", "check", "check_bad"};
  for (int i = 0; i <= CHECK_BAD; i++) printf("%s %ld\n", names[i], counts[i]);
  return 0;
}
