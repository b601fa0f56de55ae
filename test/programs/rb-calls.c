/* Calls rb_record() N times (argv[1]) with values the ring-buffer test recomputes:
 * a = +/- i * 7919 (INT_MIN at i == 3), b = 0xfedcba9876543210 ^ i,
 * s = "" when i % 50 == 0; "long-<i>-" and 150 'x' when i % 100 == 7 (a record over 112 bytes,
 * which the kernel stores with its length in array[0]); else "call-<i>-" and the first
 * i % 20 letters of the alphabet.
 * With argv[2], sleeps 200 ms before call number argv[2], so that the kernel must write a
 * time extend (a delta over 27 bits of ns). Prints how many calls it made. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define X10 "xxxxxxxxxx"
#define LONG_TAIL X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10 X10

static volatile int calls;

__attribute__((noinline)) void rb_record(int a, unsigned long long b, const char *s) {
  (void)a;
  (void)b;
  (void)s;
  calls++;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 100;
  int pause_at = argc > 2 ? atoi(argv[2]) : -1;
  char text[256];
  for (int i = 0; i < n; i++) {
    int a = (i & 1) ? -(i * 7919) : i * 7919;
    if (i == 3) a = INT_MIN;
    unsigned long long b = 0xfedcba9876543210ULL ^ (unsigned long long)i;
    if (i % 50 == 0)
      text[0] = '\0';
    else if (i % 100 == 7)
      snprintf(text, sizeof text, "long-%d-%.150s", i, LONG_TAIL);
    else
      snprintf(text, sizeof text, "call-%d-%.*s", i, i % 20, "abcdefghijklmnopqrstuvwxyz");
    if (i == pause_at) usleep(200000);
    rb_record(a, b, text);
  }
  printf("%d\n", calls);
  return 0;
}
