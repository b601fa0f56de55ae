// A benchmark target for C++ exceptions: work() is called N times (argv[1]) and throws on
// every call, through middle(), to main's catch. The program times its loop and prints
// `calls=N ns_per_call=F` on stderr, as hot.c does: a probe's cost per throw is the
// difference between a probed run and a bare one.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <stdexcept>

__attribute__((noipa)) long work(long i) {
  if (i >= 0) throw std::runtime_error("thrown");
  return i;
}

__attribute__((noipa)) long middle(long i) { return work(i) + 1; }

int main(int argc, char **argv) {
  long n = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 100000;
  long caught = 0;
  timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (long i = 0; i < n; i++) {
    try {
      middle(i);
    } catch (const std::runtime_error &) {
      caught++;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &end);
  double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
  std::fprintf(stderr, "calls=%ld ns_per_call=%.2f caught=%ld\n", n, n > 0 ? ns / n : 0.0, caught);
  return 0;
}
