// A C++ target for `upscope leaks`: blocks made with new (through libstdc++'s operator new,
// which calls malloc) in a namespace and a class template; 25 leak, the rest are deleted.
// Prints the leaked blocks and bytes it counted.
#include <cstdio>
#include <vector>

namespace shop {
template <typename T> struct Basket {
  __attribute__((noinline)) static T *fill(int n) { return new T[n]; }
};
struct Order {
  long id;
  long items[7];
};
}  // namespace shop

int main() {
  std::vector<shop::Order *> kept;
  long leaked = 0, bytes = 0;
  for (int i = 0; i < 100; i++) {
    shop::Order *o = shop::Basket<shop::Order>::fill(2);
    if (i % 4 == 0) {
      leaked++;
      bytes += 2 * sizeof(shop::Order);
    } else {
      delete[] o;
    }
  }
  std::printf("leaked %ld %ld\n", leaked, bytes);
  return 0;
}
