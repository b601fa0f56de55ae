// A program with IFUNCs of its own: `ifunc-own N` calls own_lea and own_table N times each
// and prints the calls and what they returned. own_lea's resolver picks impl_a or impl_b by
// their addresses (loaded with leas, as glibc's resolvers do); own_table's returns an entry of
// a table of function pointers (a load from data: its implementations cannot be read from its
// code). Both pick impl_a here.
#include <stdio.h>
#include <stdlib.h>

typedef long (*impl_fn)(long);

__attribute__((noinline)) static long impl_a(long x) { return x + 1; }
__attribute__((noinline)) static long impl_b(long x) { return x + 2; }

static volatile int which = 0;
static impl_fn table[2] = {impl_a, impl_b};

static impl_fn resolve_lea(void) { return which ? impl_b : impl_a; }
static impl_fn resolve_table(void) { return table[which]; }

long own_lea(long) __attribute__((ifunc("resolve_lea")));
long own_table(long) __attribute__((ifunc("resolve_table")));

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100;
  long total = 0;
  for (long i = 0; i < n; i++) total += own_lea(i) + own_table(i);
  printf("calls=%ld total=%ld\n", n, total);
  return 0;
}
