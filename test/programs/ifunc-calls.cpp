// C++ target for probes on an IFUNC (libc's strlen) in code that throws: `ifunc-calls N
// LENGTH` measures a string of LENGTH bytes N times in measure(), which throws on every third
// call, after its strlen, through outer() to main(), which catches. It prints the calls, the
// throws caught, and the total length measured.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

__attribute__((noipa)) size_t measure(const char *text, long i) {
  size_t length = std::strlen(text);
  if (i % 3 == 0) throw std::runtime_error("third");
  return length;
}

__attribute__((noipa)) size_t outer(const char *text, long i) { return measure(text, i) + 0; }

int main(int argc, char **argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 1000;
  long length = argc > 2 ? std::atol(argv[2]) : 73;
  std::string text(length, 'x');
  size_t total = 0;
  long caught = 0;
  for (long i = 0; i < n; i++) {
    try {
      total += outer(text.c_str(), i);
    } catch (const std::runtime_error &) {
      caught++;
      total += length;
    }
  }
  std::printf("calls=%ld caught=%ld total=%zu\n", n, caught, total);
  return 0;
}
