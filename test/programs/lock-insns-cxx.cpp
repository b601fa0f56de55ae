// C++ target for probes on lock-prefixed instructions (the kernel's uprobes refuse them): at
// -O2, ns::Counter::add() starts with `lock add` (a std::atomic's fetch_add whose result is
// not used). Two threads call it N times (argv[1]) each, through a function that throws and
// catches an exception every 100 calls; the program prints the calls and what the atomic kept.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace ns {
struct Counter {
  std::atomic<long> value{0};
  __attribute__((noipa)) void add(long by) { value.fetch_add(by); }
};
}  // namespace ns

static ns::Counter counter;

__attribute__((noipa)) static void step(long i) {
  counter.add(2);
  if (i % 100 == 0) throw std::runtime_error("every hundredth call");
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000;
  auto run = [n] {
    for (long i = 0; i < n; i++) {
      try {
        step(i);
      } catch (const std::runtime_error &) {
      }
    }
  };
  std::thread a(run), b(run);
  a.join();
  b.join();
  std::printf("calls=%ld added=%ld\n", 2 * n, counter.value.load());
  return 0;
}
