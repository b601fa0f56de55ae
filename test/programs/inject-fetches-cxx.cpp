// Target for the inject engine's memory and string fetches in C++, with an exception thrown
// through the probed function: calls app::greet(name, rec) CALLS times (argv[1]); for call i,
// name is "call-I" and rec is {id = i, label = "label-(i % 7)"}, except when i % 10 == 0:
// name is NULL and rec points into pages that cannot be read (greet does not read them then).
// greet throws for each i % 8 == 7 (caught by the loop); so does label_of(labels, i), which
// returns "label-(i % 7)" or NULL when i % 10 == 0. Prints "calls N thrown T sum S", S the
// sum of what greet returned (id * 2 + 1, or 7 for the unreadable ones) and of 1 for each
// label_of that returned a label.
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace app {

struct Rec {
  long id;
  const char *label;
};

__attribute__((noinline)) long greet(const char *name, const Rec *r, long i) {
  __asm__ volatile("" ::"r"(name) : "memory");
  if (i % 8 == 7) throw std::runtime_error("seven");
  if (i % 10 == 0) return 7;
  return r->id * 2 + 1;
}

// The label of call i: NULL when i % 10 == 0; throws when i % 8 == 7.
__attribute__((noinline)) const char *label_of(const char *const *labels, long i) {
  if (i % 8 == 7) throw std::runtime_error("seven");
  if (i % 10 == 0) return nullptr;
  return labels[i % 7];
}

}  // namespace app

static const char *const labels[7] = {"label-0", "label-1", "label-2", "label-3",
                                "label-4", "label-5", "label-6"};

int main(int argc, char **argv) {
  long count = argc > 1 ? atol(argv[1]) : 1000;
  char *gone = static_cast<char *>(
      mmap(nullptr, 2 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  long sum = 0;
  long thrown = 0;
  char name[32];
  app::Rec rec;
  for (long i = 0; i < count; i++) {
    const char *p = name;
    const app::Rec *r = &rec;
    if (i % 10 == 0) {
      p = nullptr;
      r = reinterpret_cast<const app::Rec *>(gone + 4096);
    } else {
      snprintf(name, sizeof name, "call-%ld", i);
    }
    rec.id = i;
    rec.label = labels[i % 7];
    try {
      sum += app::greet(p, r, i);
    } catch (const std::runtime_error &) {
      thrown++;
    }
    try {
      sum += app::label_of(labels, i) != nullptr;
    } catch (const std::runtime_error &) {
    }
  }
  printf("calls %ld thrown %ld sum %ld\n", count, thrown, sum);
  return 0;
}
