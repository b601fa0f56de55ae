// Target for stacks with inlined functions (built with -O2): unwind_leaf() is called from a
// member function and a function both inlined into calc::run(), so that one frame of the
// stack is three functions (gdb shows each as a frame of its own).
//
//   unwind-inline N   calls calc::unwind_leaf() N times that way, prints {"calls":N,"sum":S}
#include <cstdio>
#include <cstdlib>

namespace calc {

__attribute__((noinline)) long unwind_leaf(long v) {
  __asm__ volatile("");
  return v + 1;
}

struct Adder {
  long base;
  __attribute__((always_inline)) inline long add(long v) const { return unwind_leaf(v) + base; }
};

__attribute__((always_inline)) static inline long twice(const Adder &adder, long v) {
  return adder.add(v) * 2;
}

__attribute__((noinline)) long run(long n) {
  Adder adder{3};
  long sum = 0;
  for (long i = 0; i < n; i++) sum += twice(adder, i);
  return sum;
}

}  // namespace calc

int main(int argc, char **argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 100;
  long sum = calc::run(n);
  std::printf("{\"calls\":%ld,\"sum\":%ld}\n", n, sum);
  return 0;
}
