/*
 * A file with 4,096 functions besides its busy one, for attaching many probes to one file:
 *
 *   many-functions DEPTH   calls rec(DEPTH) (a recursion DEPTH + 1 calls deep) again and
 *                          again, until killed
 *
 * f000000 .. f333333 (their names are base-4 numbers) are never called: they are there to be
 * probed, so that the kernel takes a while to place one link's probes.
 */
#include <stdlib.h>

volatile int sink;

#define F(name) __attribute__((noinline)) int name(int x) { return x * 3 + sink; }
#define X4(p) F(p##0) F(p##1) F(p##2) F(p##3)
#define X16(p) X4(p##0) X4(p##1) X4(p##2) X4(p##3)
#define X64(p) X16(p##0) X16(p##1) X16(p##2) X16(p##3)
#define X256(p) X64(p##0) X64(p##1) X64(p##2) X64(p##3)
#define X1024(p) X256(p##0) X256(p##1) X256(p##2) X256(p##3)
#define X4096(p) X1024(p##0) X1024(p##1) X1024(p##2) X1024(p##3)

X4096(f)

__attribute__((noinline)) int rec(int n) {
  if (n == 0) return sink;
  return rec(n - 1) + 1;
}

int main(int argc, char **argv) {
  int depth = argc > 1 ? atoi(argv[1]) : 12;
  for (;;) sink += rec(depth);
}
