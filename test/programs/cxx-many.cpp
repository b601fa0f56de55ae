// 2,500 C++ functions of one namespace (many::f1000(long) to many::f3499(long)): f(1000 + i)
// is called (i % 5 + 1) times a round, ROUNDS rounds (argv[1]), so that each name's count
// tells it from its neighbours. A pattern over them matches more names than planning
// demangles one by one. It prints how many calls it made in all.
#include <cstdio>
#include <cstdlib>

namespace many {
long total;
#define F(n)                                                                                   \
  __attribute__((noinline)) long f##n(long x) {                                                \
    total++;                                                                                   \
    return x * 3 + n;                                                                          \
  }
#define F10(n) F(n##0) F(n##1) F(n##2) F(n##3) F(n##4) F(n##5) F(n##6) F(n##7) F(n##8) F(n##9)
#define F100(n)                                                                                \
  F10(n##0) F10(n##1) F10(n##2) F10(n##3) F10(n##4) F10(n##5) F10(n##6) F10(n##7) F10(n##8)   \
  F10(n##9)
#define F1000(n)                                                                               \
  F100(n##0) F100(n##1) F100(n##2) F100(n##3) F100(n##4) F100(n##5) F100(n##6) F100(n##7)     \
  F100(n##8) F100(n##9)
F1000(1) F1000(2) F100(30) F100(31) F100(32) F100(33) F100(34)
#undef F
#define F(n) f##n,
long (*const all[])(long) = {F1000(1) F1000(2) F100(30) F100(31) F100(32) F100(33) F100(34)};
}  // namespace many

int main(int argc, char **argv) {
  long rounds = argc > 1 ? atol(argv[1]) : 1;
  long x = 0;
  for (long r = 0; r < rounds; r++) {
    for (size_t i = 0; i < sizeof many::all / sizeof many::all[0]; i++) {
      for (size_t k = 0; k <= i % 5; k++) x = many::all[i](x) & 0xffff;
    }
  }
  fprintf(stderr, "functions=%zu calls=%ld x=%ld\n", sizeof many::all / sizeof many::all[0],
          many::total, x);
  return 0;
}
