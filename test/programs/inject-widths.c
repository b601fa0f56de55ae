// A target for return values of each width: CALLS calls of each function below, one thread,
// each printing what it returned (`u8 I VALUE`, in decimal; the pointer in hex), the truth a
// test compares the return probes' values with. Each value is cut from a 64-bit product, so
// the bits of %rax above the returned width are whatever the computation left there (the
// ABI does not clear them); ret_dirty8/16 leave them set on purpose.
//   inject-widths CALLS
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline, noipa))

static uint64_t mix(uint64_t i) { return (i + 1) * 0x9e3779b97f4a7c15ULL; }
static char table[64];

NOINLINE uint8_t ret_u8(uint64_t i) { return (uint8_t)mix(i); }
NOINLINE int8_t ret_s8(uint64_t i) { return (int8_t)mix(i); }
NOINLINE uint16_t ret_u16(uint64_t i) { return (uint16_t)(mix(i) >> 3); }
NOINLINE int16_t ret_s16(uint64_t i) { return (int16_t)(mix(i) >> 3); }
NOINLINE uint32_t ret_u32(uint64_t i) { return (uint32_t)(mix(i) >> 7); }
NOINLINE int32_t ret_s32(uint64_t i) { return (int32_t)(mix(i) >> 7); }
NOINLINE uint64_t ret_u64(uint64_t i) { return mix(i); }
NOINLINE int64_t ret_s64(uint64_t i) { return (int64_t)mix(i ^ 5); }
NOINLINE char *ret_ptr(uint64_t i) { return &table[mix(i) % 64]; }

// The low byte (word) of the argument's mix, above it every bit set: the caller reads only
// the low byte (word), a return probe must too.
uint8_t ret_dirty8(uint64_t x);
int16_t ret_dirty16(uint64_t x);
__asm__(".text\n"
        ".globl ret_dirty8\n.type ret_dirty8,@function\nret_dirty8:\n"
        "  push %rbp\n  mov %rsp,%rbp\n"
        "  mov $-1,%rax\n  mov %dil,%al\n"
        "  pop %rbp\n  ret\n.size ret_dirty8, .-ret_dirty8\n"
        ".globl ret_dirty16\n.type ret_dirty16,@function\nret_dirty16:\n"
        "  push %rbp\n  mov %rsp,%rbp\n"
        "  mov $-1,%rax\n  mov %di,%ax\n"
        "  pop %rbp\n  ret\n.size ret_dirty16, .-ret_dirty16\n");

int main(int argc, char **argv) {
  long calls = argc > 1 ? atol(argv[1]) : 100;
  setvbuf(stdout, NULL, _IOFBF, 1 << 16);
  for (long i = 0; i < calls; i++) {
    printf("u8 %ld %u\n", i, (unsigned)ret_u8(i));
    printf("s8 %ld %d\n", i, (int)ret_s8(i));
    printf("u16 %ld %u\n", i, (unsigned)ret_u16(i));
    printf("s16 %ld %d\n", i, (int)ret_s16(i));
    printf("u32 %ld %u\n", i, ret_u32(i));
    printf("s32 %ld %d\n", i, ret_s32(i));
    printf("u64 %ld %llu\n", i, (unsigned long long)ret_u64(i));
    printf("s64 %ld %lld\n", i, (long long)ret_s64(i));
    printf("ptr %ld %p\n", i, (void *)ret_ptr(i));
    printf("dirty8 %ld %u\n", i, (unsigned)ret_dirty8(mix(i)));
    printf("dirty16 %ld %d\n", i, (int)ret_dirty16(mix(i)));
  }
  printf("done %ld\n", calls);
  return 0;
}
