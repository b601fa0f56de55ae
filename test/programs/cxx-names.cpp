// C++ names for the demangling tests: namespaces, a class with overloads, a destructor and an
// operator(), a class template, a function template, an anonymous namespace and a nested
// namespace. Every probed function counts its calls; the program calls each a known number of
// times (ROUNDS from argv[1], default 3), after waiting for a line on stdin when argv[2] is
// "wait", and prints "name count" lines at the end for the tests to compare with probe counts.
#include <cstdio>
#include <cstdlib>
#include <cstring>

static long counts[16];
enum {
  METHOD_INT,
  METHOD_DOUBLE,
  METHOD_PTR,
  CALL_OP,
  DTOR,
  BOX_GET_INT,
  BOX_GET_LONG,
  TWICE_INT,
  HELPER,
  DEEP,
};

#define NOINLINE __attribute__((noinline, noipa))

namespace shapes {

class Counter {
 public:
  explicit Counter(long start) : value_(start) {}
  NOINLINE ~Counter() {
    counts[DTOR]++;
    __asm__ volatile("" ::: "memory");
  }
  NOINLINE long method(int n) {
    counts[METHOD_INT]++;
    return value_ += n;
  }
  NOINLINE long method(double d) {
    counts[METHOD_DOUBLE]++;
    return value_ += static_cast<long>(d);
  }
  NOINLINE long method(const char *s) const {
    counts[METHOD_PTR]++;
    return value_ + static_cast<long>(std::strlen(s));
  }
  NOINLINE long operator()(long n) {
    counts[CALL_OP]++;
    return value_ * n;
  }

 private:
  long value_;
};

template <typename T>
class Box {
 public:
  explicit Box(T v) : v_(v) {}
  NOINLINE T get() const;

 private:
  T v_;
};

template <>
NOINLINE int Box<int>::get() const {
  counts[BOX_GET_INT]++;
  return v_;
}

template <>
NOINLINE long Box<long>::get() const {
  counts[BOX_GET_LONG]++;
  return v_;
}

template <typename T>
NOINLINE T twice(T v) {
  counts[TWICE_INT]++;
  return v + v;
}

namespace inner::deeper {
NOINLINE long deep(long a, long b) {
  counts[DEEP]++;
  return a * b;
}
}  // namespace inner::deeper

}  // namespace shapes

namespace {
NOINLINE long helper(long n) {
  counts[HELPER]++;
  return n + 1;
}
}  // namespace

int main(int argc, char **argv) {
  long rounds = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 3;
  if (argc > 2 && std::strcmp(argv[2], "wait") == 0) {
    char line[16];
    if (std::fgets(line, sizeof line, stdin) == nullptr) return 2;
  }
  long sum = 0;
  for (long r = 0; r < rounds; r++) {
    shapes::Counter c(r);
    sum += c.method(1);                       // method(int): rounds
    sum += c.method(2.0);                     // method(double): rounds
    sum += c.method(2.5);                     // method(double): 2 * rounds
    sum += c.method("abc");                   // method(char const*) const: rounds
    sum += c(3);                              // operator()(long): rounds
    sum += shapes::Box<int>(int(r)).get();    // Box<int>::get: rounds
    sum += shapes::Box<long>(r).get();        // Box<long>::get: rounds
    sum += shapes::twice<int>(int(r));        // twice<int>: rounds
    sum += helper(r);                         // (anonymous namespace)::helper: rounds
    sum += shapes::inner::deeper::deep(r, 2); // deep: rounds
  }                                           // ~Counter: rounds
  static const char *const names[] = {
      "method_int", "method_double", "method_ptr", "call_op", "dtor",
      "box_get_int", "box_get_long", "twice_int", "helper", "deep",
  };
  for (int i = 0; i <= DEEP; i++) std::printf("%s %ld\n", names[i], counts[i]);
  std::printf("sum %ld\n", sum);
  return 0;
}
