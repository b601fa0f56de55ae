// A C++ function whose first instruction the kernel single-steps (`test %rdi,%rdi` of a null
// check) and through which an exception passes: `stepped-start-cxx N` calls checked(&i) N
// times, whose callee throws on every third call (caught in main), and checked(nullptr) N
// times; it prints its own counts of calls of checked, returns from it and throws.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

static long calls, returns, throws;

__attribute__((noipa)) long thrower(long i) {
  if (i % 3 == 0) throw std::runtime_error("third");
  return i;
}

__attribute__((noipa)) long checked(const long *p) {
  if (p == nullptr) return -1;
  calls++;
  long r = thrower(*p) + 1;
  returns++;
  return r;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100;
  long total = 0;
  for (long i = 0; i < n; i++) {
    try {
      total += checked(&i);
    } catch (const std::exception &) {
      throws++;
    }
    total += checked(nullptr);
  }
  // checked() is called twice per round, once with nothing to check.
  printf("checked=%ld calls=%ld returns=%ld throws=%ld total=%ld\n", 2 * n, calls, returns, throws,
         total);
  return 0;
}
