// Target for fetching C++ variables by name: visit(d, p, n, k) takes a Derived by reference and
// by pointer, whose members id and kind are its base class's (Base) and extra its own, and its
// kind again by reference (k, a const int&). Called
// CALLS times (argv[1]) with id = i * 7, kind = i * 2 + 1, extra = -i, n = i; prints
// "call id=I kind=K extra=E n=N" before each call.
#include <cstdio>
#include <cstdlib>

struct Base {
  long id;
  int kind;
};

struct Derived : Base {
  long extra;
};

__attribute__((noinline)) long visit(const Derived &d, const Derived *p, int n, const int &k) {
  return d.id + p->kind + d.extra + n + k;
}

int main(int argc, char **argv) {
  int calls = argc > 1 ? std::atoi(argv[1]) : 3;
  long sum = 0;
  for (int i = 0; i < calls; i++) {
    Derived d;
    d.id = i * 7L;
    d.kind = i * 2 + 1;
    d.extra = -i;
    std::printf("call id=%ld kind=%d extra=%ld n=%d\n", d.id, d.kind, d.extra, i);
    sum += visit(d, &d, i, d.kind);
  }
  std::printf("sum %ld\n", sum);
  return 0;
}
