// Target for the tests of tracers side by side, in C++: prints "ready PID", waits until the
// file GO exists, then calls app::step() (through which check() throws now and then, caught in main) with a
// short pause every 10 calls, until the file STOP exists; then prints "calls N thrown T", N
// being its own count of calls (the truth).
//
//   coexist-loop GO STOP
#include <unistd.h>

#include <cstdio>
#include <stdexcept>

// One thread calls: a plain counter (a locked add, as an atomic one would be, is an
// instruction the kernel's uprobes refuse to probe).
static long calls;

namespace app {
__attribute__((noinline)) long check(long i) {
  if ((i & 127) == 127) throw std::runtime_error("step");
  return i * 2 + 1;
}

// Probed: the exceptions check() throws pass through it.
__attribute__((noinline)) long step(long i) {
  calls++;
  return check(i) + 1;
}
}  // namespace app

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  std::printf("ready %d\n", (int)getpid());
  std::fflush(stdout);
  while (access(argv[1], F_OK) != 0) usleep(10000);
  long sum = 0, thrown = 0;
  for (long i = 0; access(argv[2], F_OK) != 0; i++) {
    try {
      sum += app::step(i);
    } catch (const std::exception &) {
      thrown++;
    }
    if (i % 10 == 9) usleep(1000);
  }
  std::printf("calls %ld thrown %ld sum %ld\n", (long)calls, thrown, sum);
  return 0;
}
