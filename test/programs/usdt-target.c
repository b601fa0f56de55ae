/*
 * Target for USDT tests: <sys/sdt.h> probes with 0 to 8 arguments of every size and sign, in
 * registers, in memory (stack slots, a struct behind a pointer, an array element, a global)
 * and constants, as gcc places them at the optimisation level it is built with. It prints
 * every value it passes, one line per probe hit, so a test can compare what a tracer saw.
 * The probe `usdt:gated` (usdt-gated.c, built into the same program) has a semaphore; the
 * target counts the hits at which it was enabled and prints that count at the end.
 * The probe `usdt:text` passes a string (a `const char *`): `arg0:string` reads it.
 * Usage: usdt-target CALLS [SLEEP_MS]   (SLEEP_MS: wait before the calls and between them)
 * Build: gcc usdt-target.c usdt-gated.c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>

struct pair {
  int32_t a;
  int64_t b;
};

int64_t usdt_total = -5;
void gated(long i);
static const char *const WORDS[] = {"alpha", "beta gamma", ""};
extern long gated_enabled;

/* noipa: each function is called for real, with arguments the compiler cannot see through. */
__attribute__((noipa)) void probes(long i, struct pair *p, const int32_t *arr, long k) {
  STAP_PROBE(usdt, none);
  int8_t s8 = (int8_t)(i - 100);
  uint8_t u8 = (uint8_t)(i + 200);
  int16_t s16 = (int16_t)(-i * 300);
  uint16_t u16 = (uint16_t)(i * 1000 + 7);
  int32_t s32 = (int32_t)(-i * 70000);
  uint32_t u32 = (uint32_t)(i * 3000000000u);
  STAP_PROBE6(usdt, ints, s8, u8, s16, u16, s32, u32);
  printf("ints %d %u %d %u %d %u\n", s8, u8, s16, u16, s32, u32);
  int64_t s64 = -i * 10000000000LL;
  uint64_t u64 = (uint64_t)i * 0x1000000001ULL;
  STAP_PROBE8(usdt, wide, s64, u64, p, 42, -7, usdt_total, p->a, p->b);
  printf("wide %lld %llu %llu 42 -7 %lld %d %lld\n", (long long)s64, (unsigned long long)u64,
         (unsigned long long)(uintptr_t)p, (long long)usdt_total, p->a, (long long)p->b);
  STAP_PROBE2(usdt, idx, arr[k], arr[i & 3]);
  const char *word = WORDS[i % 3];
  STAP_PROBE2(usdt, text, word, i);
  printf("text %s %ld\n", word, i);
}

int main(int argc, char **argv) {
  long calls = argc > 1 ? atol(argv[1]) : 3;
  long sleep_ms = argc > 2 ? atol(argv[2]) : 0;
  struct timespec pause = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000};
  struct pair p = {3, -4};
  int32_t arr[4] = {-1, 2, -3, 4};
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (sleep_ms > 0) nanosleep(&pause, NULL);
  for (long i = 0; i < calls; i++) {
    p.a = (int32_t)(i * 3 - 1);
    p.b = -(int64_t)i * 5000000000LL;
    usdt_total += i;
    long k = (argc + i) & 3;
    probes(i, &p, arr, k);
    printf("idx %d %d\n", arr[k], arr[i & 3]);
    gated(i);
    if (sleep_ms > 0) nanosleep(&pause, NULL);
  }
  printf("done calls=%ld gated_enabled=%ld\n", calls, gated_enabled);
  return 0;
}
