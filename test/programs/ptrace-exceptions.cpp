// Target for return probes and C++ exceptions: thrower() throws through middle(), which is
// return-probed too, and main() catches; then middle() returns normally a few times. With a
// return probe on both, the exception must still unwind to the catch, as without probes.
#include <cstdio>
#include <stdexcept>

static int normal_returns;

__attribute__((noipa)) int thrower(int n) {
  if (n % 2 == 1) throw std::runtime_error("odd");
  return n;
}

__attribute__((noipa)) int middle(int n) {
  int r = thrower(n);
  normal_returns++;
  return r + 1;
}

int main() {
  int caught = 0;
  long sum = 0;
  for (int i = 0; i < 10; i++) {
    try {
      sum += middle(i);
    } catch (const std::runtime_error &e) {
      caught++;
    }
  }
  std::printf("caught=%d sum=%ld normal_returns=%d\n", caught, sum, normal_returns);
  return 0;
}
