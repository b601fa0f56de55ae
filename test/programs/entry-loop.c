// A function whose first instruction is the head of its own loop, and one called again at the
// stack pointer of a call a longjmp left: `entry-loop N` makes N calls of spin(5), an asm
// loop (`spin: dec %edi; jnz spin; ret`) whose entry is reached five times a call, each from
// count_spin(); then N calls of leave(i) at one stack pointer, each after a setjmp, the odd
// ones left by a longjmp from their callee. It prints what it did:
// spin=N leave=N leave_returned=N/2 (rounded up).
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

static jmp_buf back;
static volatile int spins, leaves, returned;

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
  printf("spin=%d leave=%d leave_returned=%d\n", spins, leaves, returned);
  return 0;
}
