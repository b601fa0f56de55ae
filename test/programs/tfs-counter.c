/*
 * Target for the tracefs session tests: calls tfs_add() and tfs_twice() a number of times
 * given on the command line and prints how many calls it made of each, so the test compares
 * the kernel's events with the program's own count.
 */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long tfs_add(int a, long b) { return a + b; }

__attribute__((noinline)) long tfs_twice(long x) { return tfs_add((int)x, x); }

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 5;
  long total = 0;
  int add_calls = 0, twice_calls = 0;
  for (int i = 0; i < n; i++) {
    total += tfs_add(i, -i);
    add_calls++;
    if (i % 2 == 0) {
      total += tfs_twice(i);
      twice_calls++;
      add_calls++;
    }
  }
  printf("tfs_add %d tfs_twice %d total %ld\n", add_calls, twice_calls, total);
  return 0;
}
