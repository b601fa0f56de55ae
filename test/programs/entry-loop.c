// A function whose first instruction is the head of its own loop, and one called again at the
// stack pointer of a call a longjmp left: `entry-loop N` makes N calls of spin(5), an asm
// loop (`spin: dec %edi; jnz spin; ret`) whose entry is reached five times a call, each from
// count_spin(); then N calls of leave(i) at one stack pointer, each after a setjmp, the odd
// ones left by a longjmp from their callee; then N calls of inner_loop(5), whose loop's head
// is its second instruction, one byte in (what a 5-byte patch of its entry would cover). It
// prints what it did: spin=N leave=N leave_returned=N/2 (rounded up) inner=N.
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

__asm__(
    ".text\n"
    ".globl spin\n"
    ".type spin,@function\n"
    "spin:\n"
    "\tdec %edi\n"
    "\tjnz spin\n"
    "\tret\n"
    ".size spin, .-spin\n");
void spin(int times);

__asm__(
    ".text\n"
    ".globl inner_loop\n"
    ".type inner_loop,@function\n"
    "inner_loop:\n"
    "\tpush %rbx\n"
    "1:\n"
    "\tdec %edi\n"
    "\tnop\n"
    "\tnop\n"
    "\tnop\n"
    "\tnop\n"
    "\tnop\n"
    "\tnop\n"
    "\tjnz 1b\n"
    "\tpop %rbx\n"
    "\tret\n"
    ".size inner_loop, .-inner_loop\n");
void inner_loop(int times);

static jmp_buf back;
static volatile int spins, leaves, returned, inners;

__attribute__((noinline)) void count_spin(void) {
  spins++;
  spin(5);
  __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void jump_out(int i) {
  if (i & 1) longjmp(back, 1);
  __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void leave(int i) {
  leaves++;
  jump_out(i);
  returned++;
  __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 3;
  for (int i = 0; i < n; i++) count_spin();
  for (volatile int i = 0; i < n; i++) {
    if (setjmp(back) == 0) leave(i);
  }
  for (int i = 0; i < n; i++) {
    inners++;
    inner_loop(5);
  }
  printf("spin=%d leave=%d leave_returned=%d inner=%d\n", spins, leaves, returned, inners);
  return 0;
}
