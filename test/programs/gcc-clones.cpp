// Functions GCC -O2 copies and splits, for the tests of clone names: app::Calc::add and
// app::Box<T>::get become `.isra.0` clones (they read one field of a struct passed by
// reference), app::scale a `.constprop.0` clone (always called with factor 3), app::work a
// `.part.0` (its early return is inlined into main, the rest called), and app::check keeps
// its throw in a `.cold` part. Each counts its calls; main calls each ROUNDS times (argv[1],
// default 3) and prints "name count" lines. With argv[2] "throw", check throws once at the end.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

static long counts[6];
enum { ADD, BOX_INT, BOX_LONG, SCALE, WORK_SLOW, CHECK };

namespace app {
struct Big {
  long a, b, c, d, e, f;
};

class Calc {
 public:
  __attribute__((noinline)) static long add(const Big &big, long n) {
    counts[ADD]++;
    return big.c + n;
  }
};

template <typename T>
struct Box {
  T v;
  __attribute__((noinline)) static T get(const Box &box, const Big &big) {
    counts[sizeof(T) == sizeof(int) ? BOX_INT : BOX_LONG]++;
    return box.v + static_cast<T>(big.d);
  }
};

__attribute__((noinline)) static long scale(long x, long factor) {
  counts[SCALE]++;
  return x * factor + (x >> factor);
}

static long work(long x) {
  if (__builtin_expect(x < 100, 1)) return x;
  counts[WORK_SLOW]++;
  long s = 0;
  for (long i = 0; i < x; i++) {
    s += i * i % 7;
    if (s > 1000000) s /= 3;
  }
  for (long i = 0; i < x; i++) s ^= i * 31 % 11;
  return s;
}

__attribute__((noinline)) long check(long x) {
  counts[CHECK]++;
  if (__builtin_expect(x < 0, 0)) throw std::runtime_error("negative " + std::to_string(x));
  return x + 1;
}
}  // namespace app

volatile long sink;

int main(int argc, char **argv) {
  long rounds = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 3;
  app::Big big{1, 2, 3, 4, 5, 6};
  long sum = 0;
  for (long r = 0; r < rounds; r++) {
    sum += app::Calc::add(big, r);
    sum += app::Box<int>::get(app::Box<int>{int(r)}, big);
    sum += app::Box<long>::get(app::Box<long>{r}, big);
    sum += app::scale(r, 3) + app::scale(r + 1, 3);
    sum += app::work(r * 50) + app::work(r * 70 + 1);
    sum += app::check(r);
  }
  if (argc > 2 && std::strcmp(argv[2], "throw") == 0) {
    try {
      sum += app::check(-1);
    } catch (const std::exception &) {
      sum += 1;
    }
  }
  sink = sum;
  static const char *const names[] = {"add", "box_get_int", "box_get_long", "scale", "work_slow", "check"};
  for (int i = 0; i <= CHECK; i++) std::printf("%s %ld\n", names[i], counts[i]);
  return 0;
}
