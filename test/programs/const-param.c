// A parameter every call passes the same: GCC at -O2 clones scaled() for it (scaled.constprop.0)
// and its DWARF says the parameter is the constant (DW_AT_const_value). Called CALLS times
// (argv[1]) with x = i; prints "call x=I factor=3" before each call.
#include <stdio.h>
#include <stdlib.h>

static __attribute__((noinline)) long scaled(long x, int factor) { return x * factor + 1; }

int main(int argc, char **argv) {
  int calls = argc > 1 ? atoi(argv[1]) : 3;
  long sum = 0;
  for (int i = 0; i < calls; i++) {
    printf("call x=%d factor=3\n", i);
    fflush(stdout);
    sum += scaled(i, 3);
  }
  printf("sum %ld\n", sum);
  return 0;
}
