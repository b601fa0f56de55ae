// C++ target for probes on lock-prefixed instructions (the kernel's uprobes refuse them): at
// -O2, ns::Counter::add() starts with `lock add` (a std::atomic's fetch_add whose result is
// not used). Two threads call it N times (argv[1]) each, through a function that throws and
// catches an exception every 100 calls; the program prints the calls and what the atomic kept.
// `lock-insns-cxx until FILE`: the threads call it until FILE exists (looked for every
// millisecond), then 100,000 times more each; the calls printed are those the threads counted.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

static int until(const char *file) {
  std::atomic<bool> stopping{false};
  std::atomic<long> calls{0};
  auto run = [&] {
    long i = 0;
    auto one = [&] {
      try {
        step(i++);
      } catch (const std::runtime_error &) {
      }
    };
    while (!stopping.load(std::memory_order_relaxed)) one();
    for (long k = 0; k < 100000; k++) one();
    calls += i;
  };
  std::thread a(run), b(run);
  while (access(file, F_OK) != 0) usleep(1000);
  stopping = true;
  a.join();
  b.join();
  std::printf("calls=%ld added=%ld\n", calls.load(), counter.value.load());
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 2 && std::strcmp(argv[1], "until") == 0) return until(argv[2]);
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
