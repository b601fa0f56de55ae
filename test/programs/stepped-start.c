// Functions whose first instruction the kernel's uprobes single-step (a trap more each call),
// written out so that what follows it is known. `stepped-start N` calls each N times (with
// 0, 1, 2, 0, 1, ... as the argument) and prints N and how many calls had 0.
// - flags_first: test %rdi,%rdi; je: its entry is probed on the je (emulated), past the test;
// - scratch_first: mov %rdi,%rax; push %rbx: probed on the push, past the mov into %rax;
// - arg_written: mov %rdi,%rdx first (an argument's register): not moved;
// - loop_back: a loop jumps back to the je after the test: not moved (a call would hit twice);
// - table_jump: cmp then ja, and a jump table that may land anywhere: not moved;
// - shared_head: test then je, but another function (shared_tail) starts at the je: not moved;
// - pointer_tail, register_tail: test then je, and a tail call through a pointer in memory or
//   in a register: moved (neither can land in the function);
// - register_table: cmp then ja, and a jump table as gcc writes one in position-independent
//   code (an entry loaded by index, added to the table's base, jmp *%rax): not moved.
#include <stdio.h>
#include <stdlib.h>

long flags_first(long v);
long scratch_first(long v);
long arg_written(long v);
long loop_back(long v);
long table_jump(long v);
long shared_head(long v);
long shared_tail(long v);
long pointer_tail(long v, long (**to)(long));
long register_tail(long v, long (**to)(long));
long register_table(long v);

/** Where pointer_tail and register_tail go on. */
__attribute__((noipa)) long tail_target(long v) { return v + 6; }

__asm__(
    ".text\n"
    ".globl flags_first\n.type flags_first,@function\nflags_first:\n"
    "  test %rdi,%rdi\n"
    "  je 1f\n"
    "  lea 1(%rdi),%rax\n"
    "  ret\n"
    "1:\n"
    "  xor %eax,%eax\n"
    "  ret\n"
    ".size flags_first,.-flags_first\n"
    ".globl scratch_first\n.type scratch_first,@function\nscratch_first:\n"
    "  mov %rdi,%rax\n"
    "  push %rbx\n"
    "  lea 2(%rax),%rbx\n"
    "  mov %rbx,%rax\n"
    "  pop %rbx\n"
    "  ret\n"
    ".size scratch_first,.-scratch_first\n"
    ".globl arg_written\n.type arg_written,@function\narg_written:\n"
    "  mov %rdi,%rdx\n"
    "  test %rdx,%rdx\n"
    "  je 1f\n"
    "  lea 3(%rdx),%rax\n"
    "  ret\n"
    "1:\n"
    "  xor %eax,%eax\n"
    "  ret\n"
    ".size arg_written,.-arg_written\n"
    ".globl loop_back\n.type loop_back,@function\nloop_back:\n"
    "  test %rdi,%rdi\n"
    "1:\n"
    "  je 2f\n"
    "  sub $1,%rdi\n"
    "  test %rdi,%rdi\n"
    "  jmp 1b\n"
    "2:\n"
    "  mov $4,%eax\n"
    "  ret\n"
    ".size loop_back,.-loop_back\n"
    ".globl table_jump\n.type table_jump,@function\ntable_jump:\n"
    "  cmp $2,%rdi\n"
    "  ja 9f\n"
    "  lea table_jump_cases(%rip),%rax\n"
    "  jmp *(%rax,%rdi,8)\n"
    "1:\n"
    "  mov $10,%eax\n"
    "  ret\n"
    "2:\n"
    "  mov $20,%eax\n"
    "  ret\n"
    "9:\n"
    "  mov $30,%eax\n"
    "  ret\n"
    ".size table_jump,.-table_jump\n"
    ".section .data.rel.ro\n"
    "table_jump_cases: .quad 1b, 2b, 9b\n"
    ".text\n"
    ".globl shared_head\n.type shared_head,@function\nshared_head:\n"
    "  test %rdi,%rdi\n"
    ".globl shared_tail\n.type shared_tail,@function\nshared_tail:\n"
    "  je 1f\n"
    "  lea 5(%rdi),%rax\n"
    "  ret\n"
    "1:\n"
    "  xor %eax,%eax\n"
    "  ret\n"
    ".size shared_tail,.-shared_tail\n"
    ".size shared_head,.-shared_head\n"
    ".globl pointer_tail\n.type pointer_tail,@function\npointer_tail:\n"
    "  test %rdi,%rdi\n"
    "  je 1f\n"
    "  jmp *(%rsi)\n"
    "1:\n"
    "  xor %eax,%eax\n"
    "  ret\n"
    ".size pointer_tail,.-pointer_tail\n"
    ".globl register_tail\n.type register_tail,@function\nregister_tail:\n"
    "  test %rdi,%rdi\n"
    "  je 1f\n"
    "  mov (%rsi),%rax\n"
    "  jmp *%rax\n"
    "1:\n"
    "  xor %eax,%eax\n"
    "  ret\n"
    ".size register_tail,.-register_tail\n"
    ".globl register_table\n.type register_table,@function\nregister_table:\n"
    "  cmp $2,%rdi\n"
    "  ja 9f\n"
    "  lea register_table_cases(%rip),%rdx\n"
    "  movslq (%rdx,%rdi,4),%rax\n"
    "  add %rdx,%rax\n"
    "  jmp *%rax\n"
    "1:\n"
    "  mov $11,%eax\n"
    "  ret\n"
    "2:\n"
    "  mov $21,%eax\n"
    "  ret\n"
    "9:\n"
    "  mov $31,%eax\n"
    "  ret\n"
    ".size register_table,.-register_table\n"
    ".section .rodata\n"
    ".p2align 2\n"
    "register_table_cases: .long 1b-register_table_cases, 2b-register_table_cases, 9b-register_table_cases\n"
    ".text\n");

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100;
  long total = 0, zeros = 0;
  long (*to)(long) = tail_target;
  for (long i = 0; i < n; i++) {
    long v = i % 3;
    zeros += v == 0;
    total += flags_first(v) + scratch_first(v) + arg_written(v) + loop_back(v) + table_jump(v) +
             shared_head(v) + pointer_tail(v, &to) + register_tail(v, &to) + register_table(v);
  }
  printf("calls=%ld zeros=%ld total=%ld\n", n, zeros, total);
  return 0;
}
