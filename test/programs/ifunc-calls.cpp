// C++ target for probes on IFUNCs (libc's strlen and memset) in code that throws:
// `ifunc-calls N LENGTH` fills a buffer of LENGTH+1 bytes with memset and measures a string of
// LENGTH bytes in measure(), N times each; measure() throws on every third call, after its
// strlen, through outer() to main(), which catches. It prints the calls, the
// throws caught, and the total length measured.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
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
  // Left unfilled when made (a std::string or vector of it would memset it once more).
  std::unique_ptr<char[]> buffer(new char[length + 1]);
  size_t total = 0;
  long caught = 0;
  for (long i = 0; i < n; i++) {
    // Through a volatile pointer: a call of libc's memset, not a builtin's stores.
    void *(*volatile fill)(void *, int, size_t) = std::memset;
    fill(buffer.get(), 'y', length + 1);
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
