// Calls nested deeper than the kernel sets return trampolines for (64 at once on a thread):
// `nested chain N` calls a chain of 100 functions, chain_0 calling chain_1 ... chain_99, N
// times; `nested recurse DEPTH N` calls recurse(DEPTH), which calls itself down to 0, N
// times; `nested jump DEPTH N` N times calls dive(DEPTH), which calls itself down to 0 and
// longjmps out of them all, then recurse(10); `nested hops DEPTH N` N times calls
// rec_hop(DEPTH), which calls hop, which jumps to rec_hop (a tail call: the kernel keeps the
// trampoline of each, chained), down to 0. It prints how many calls it made: calls=TOTAL.
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

volatile long sink;

#define STEP(n, next)                             \
  __attribute__((noinline)) void chain_##n(void) { \
    next;                                         \
    sink++;                                       \
    __asm__ volatile("" ::: "memory");            \
  }
#define LINK(n, m) STEP(n, chain_##m())

__attribute__((noinline)) void chain_99(void) {
  sink++;
  __asm__ volatile("" ::: "memory");
}
LINK(98, 99) LINK(97, 98) LINK(96, 97) LINK(95, 96) LINK(94, 95) LINK(93, 94) LINK(92, 93)
LINK(91, 92) LINK(90, 91) LINK(89, 90) LINK(88, 89) LINK(87, 88) LINK(86, 87) LINK(85, 86)
LINK(84, 85) LINK(83, 84) LINK(82, 83) LINK(81, 82) LINK(80, 81) LINK(79, 80) LINK(78, 79)
LINK(77, 78) LINK(76, 77) LINK(75, 76) LINK(74, 75) LINK(73, 74) LINK(72, 73) LINK(71, 72)
LINK(70, 71) LINK(69, 70) LINK(68, 69) LINK(67, 68) LINK(66, 67) LINK(65, 66) LINK(64, 65)
LINK(63, 64) LINK(62, 63) LINK(61, 62) LINK(60, 61) LINK(59, 60) LINK(58, 59) LINK(57, 58)
LINK(56, 57) LINK(55, 56) LINK(54, 55) LINK(53, 54) LINK(52, 53) LINK(51, 52) LINK(50, 51)
LINK(49, 50) LINK(48, 49) LINK(47, 48) LINK(46, 47) LINK(45, 46) LINK(44, 45) LINK(43, 44)
LINK(42, 43) LINK(41, 42) LINK(40, 41) LINK(39, 40) LINK(38, 39) LINK(37, 38) LINK(36, 37)
LINK(35, 36) LINK(34, 35) LINK(33, 34) LINK(32, 33) LINK(31, 32) LINK(30, 31) LINK(29, 30)
LINK(28, 29) LINK(27, 28) LINK(26, 27) LINK(25, 26) LINK(24, 25) LINK(23, 24) LINK(22, 23)
LINK(21, 22) LINK(20, 21) LINK(19, 20) LINK(18, 19) LINK(17, 18) LINK(16, 17) LINK(15, 16)
LINK(14, 15) LINK(13, 14) LINK(12, 13) LINK(11, 12) LINK(10, 11) LINK(9, 10) LINK(8, 9)
LINK(7, 8) LINK(6, 7) LINK(5, 6) LINK(4, 5) LINK(3, 4) LINK(2, 3) LINK(1, 2) LINK(0, 1)

__attribute__((noinline)) long recurse(long n) {
  if (n == 0) return 0;
  long r = recurse(n - 1) + 1;
  __asm__ volatile("" ::: "memory");
  return r;
}

/** Jumps to rec_hop: a tail call, its return address rec_hop's caller's. */
long hop(long n);
__asm__(".text\n"
        ".globl hop\n"
        ".type hop, @function\n"
        "hop:\n"
        "  jmp rec_hop\n"
        ".size hop, .-hop\n");

__attribute__((noinline)) long rec_hop(long n) {
  if (n == 0) return 0;
  long r = hop(n - 1) + 1;
  __asm__ volatile("" ::: "memory");
  return r;
}

static jmp_buf out;

__attribute__((noinline)) long dive(long n) {
  if (n == 0) longjmp(out, 1);
  long r = dive(n - 1) + 1;
  __asm__ volatile("" ::: "memory");
  return r;
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "chain") == 0) {
    long n = atol(argv[2]);
    for (long i = 0; i < n; i++) chain_0();
    printf("calls=%ld\n", 100 * n);
  } else if (argc > 3 && strcmp(argv[1], "recurse") == 0) {
    long depth = atol(argv[2]), n = atol(argv[3]);
    for (long i = 0; i < n; i++) recurse(depth);
    printf("calls=%ld\n", (depth + 1) * n);
  } else if (argc > 3 && strcmp(argv[1], "jump") == 0) {
    long depth = atol(argv[2]), n = atol(argv[3]);
    for (long i = 0; i < n; i++) {
      if (setjmp(out) == 0) dive(depth);
      recurse(10);
    }
    printf("calls=%ld\n", (depth + 1 + 11) * n);
  } else if (argc > 3 && strcmp(argv[1], "hops") == 0) {
    long depth = atol(argv[2]), n = atol(argv[3]);
    for (long i = 0; i < n; i++) rec_hop(depth);
    printf("calls=%ld\n", (2 * depth + 1) * n);
  } else {
    fprintf(stderr,
            "usage: nested chain N | nested recurse DEPTH N | nested jump DEPTH N | nested hops "
            "DEPTH N\n");
    return 2;
  }
  return 0;
}
