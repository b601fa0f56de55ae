/* Varied machine code for the x86-64 decoder tests: compiled at -O0 and -O2, every
 * instruction of .text is compared with objdump. Each function exercises a different kind of
 * code: jump tables, calls through pointers, floating point, vector loops, TLS, string
 * instructions, 64-bit immediates, division, inline assembly of rarer instructions. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __thread int tls_counter;
static volatile int sink;
static double table[64];
static int (*handler)(int);

__attribute__((noinline)) int add(int a, int b) { return a + b; }

__attribute__((noinline)) int classify(int x) {
  switch (x) {
  case 0: return 11;
  case 1: return 23;
  case 2: return 37;
  case 3: return 41;
  case 4: return 53;
  case 5: return 67;
  case 6: return 79;
  case 7: return 83;
  default: return -1;
  }
}

__attribute__((noinline)) double average(const double *values, int n) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += values[i];
  return n > 0 ? sum / n : 0.0;
}

__attribute__((noinline)) void scale(float *restrict out, const float *restrict in, int n, float k) {
  for (int i = 0; i < n; i++) out[i] = in[i] * k + 1.0f;
}

__attribute__((noinline)) uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

__attribute__((noinline)) long divide(long a, long b, long *rem) {
  *rem = a % b;
  return a / b;
}

__attribute__((noinline)) int sum_varargs(int count, ...) {
  va_list ap;
  va_start(ap, count);
  int total = 0;
  for (int i = 0; i < count; i++) total += va_arg(ap, int);
  va_end(ap);
  return total;
}

__attribute__((noinline)) void clear(char *buffer, size_t n) { memset(buffer, 0, n); }

__attribute__((noinline)) int bump_tls(void) { return ++tls_counter; }

__attribute__((noinline)) int call_through(int x) { return handler != NULL ? handler(x) : x; }

__attribute__((noinline)) int count_bits(uint32_t v) {
  int n = 0;
  while (v != 0) {
    v &= v - 1;
    n++;
  }
  return n;
}

__attribute__((noinline)) int max3(int a, int b, int c) {
  int m = a > b ? a : b;
  return m > c ? m : c;
}

struct big {
  long values[12];
};

__attribute__((noinline)) struct big copy_big(const struct big *in) {
  struct big out = *in;
  out.values[0]++;
  return out;
}

__attribute__((noinline)) int recurse(int n) { return n <= 1 ? 1 : n * recurse(n - 1); }

__attribute__((noinline)) void rare_instructions(long *p) {
  long value = 1;
  __asm__ volatile("pause\n\t"
                   "xchg %%ax,%%ax\n\t"
                   "nopl 0x0(%%rax,%%rax,1)\n\t"
                   "lock xaddq %0,(%1)\n\t"
                   "rdtsc\n\t"
                   "cmpxchg %%rcx,(%1)\n\t"
                   "bswap %%rcx\n\t"
                   "movabs $0x1122334455667788,%%rdx\n\t"
                   "cqto\n\t"
                   : "+r"(value)
                   : "r"(p)
                   : "rax", "rcx", "rdx", "memory");
}

__attribute__((noinline)) double fill_table(int n) {
  double acc = 0;
  for (int i = 0; i < n && i < 64; i++) {
    table[i] = i * 0.5;
    acc += table[i];
  }
  return acc;
}

static int twice(int x) { return 2 * x; }

int main(int argc, char **argv) {
  (void)argv;
  handler = twice;
  double values[4] = {1, 2, 3, 4};
  float in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
  long rem;
  char buffer[64];
  struct big b = {{0}};
  long cell = 0;
  scale(out, in, 8, 2.0f);
  clear(buffer, sizeof buffer);
  rare_instructions(&cell);
  sink = add(argc, 2) + classify(argc) + (int)average(values, 4) + (int)out[3] +
         (int)mix((uint64_t)argc) + (int)divide(100, argc + 1, &rem) + sum_varargs(3, 1, 2, 3) +
         bump_tls() + call_through(argc) + count_bits(0xf0f0u) + max3(1, argc, 3) +
         (int)copy_big(&b).values[0] + recurse(5) + (int)fill_table(argc + 10) + buffer[3];
  printf("%d\n", sink);
  return 0;
}
