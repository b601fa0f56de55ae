// Functions that begin with VEX instructions, which the kernel's uprobes refuse (vmovdqu:
// opcode 0x6f) or would mishandle (vzeroupper: taken for a jump), as hand-written AVX code
// (OpenSSL's in node, glibc's memset) does. `vex-start N` calls each N times and prints N.
// - vex_loads: vzeroupper, a vector load, then an instruction the kernel takes: its entry is
//   probed on that one, past both;
// - vex_loop: the same, but a loop jumps back to the load: not moved (a call would hit twice);
// - vex_gpr: vmovd %xmm0,%eax writes a general register: not moved.
#include <stdio.h>
#include <stdlib.h>

long vex_loads(const char *from);
long vex_loop(const char *from, long times);
long vex_gpr(void);

__asm__(
    ".text\n"
    ".globl vex_loads\n.type vex_loads,@function\nvex_loads:\n"
    "  vzeroupper\n"
    "  vmovdqu (%rdi),%ymm1\n"
    "  mov $1,%eax\n"
    "  vzeroupper\n"
    "  ret\n"
    ".size vex_loads,.-vex_loads\n"
    ".globl vex_loop\n.type vex_loop,@function\nvex_loop:\n"
    "  vzeroupper\n"
    "1:\n"
    "  vmovdqu (%rdi),%ymm1\n"
    "  sub $1,%rsi\n"
    "  jnz 1b\n"
    "  mov $2,%eax\n"
    "  vzeroupper\n"
    "  ret\n"
    ".size vex_loop,.-vex_loop\n"
    ".globl vex_gpr\n.type vex_gpr,@function\nvex_gpr:\n"
    "  vmovd %xmm0,%eax\n"
    "  mov $3,%eax\n"
    "  ret\n"
    ".size vex_gpr,.-vex_gpr\n");

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100;
  static char data[64];
  long total = 0;
  for (long i = 0; i < n; i++) total += vex_loads(data) + vex_loop(data, 3) + vex_gpr();
  printf("calls=%ld total=%ld\n", n, total);
  return 0;
}
