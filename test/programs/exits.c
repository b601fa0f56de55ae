// Functions with several ways out, for the return-site finder: a tail call, a switch that
// jumps through a table, several returns, a loop. Built with -O2; objdump is the truth.
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long exits_callee(long x) { return x * 3 + 1; }

// Ends with a jump to exits_callee (a tail call) on one path, a ret on the other.
__attribute__((noinline)) long exits_tail(long x) {
  if (x > 100) return x;
  return exits_callee(x + 1);
}

// A dense switch: gcc jumps through a table of offsets (jmp *%rax), inside the function.
__attribute__((noinline)) long exits_switch(long x) {
  switch (x) {
    case 0: return exits_callee(x) + 11;
    case 1: return x * 7 + 3;
    case 2: return exits_callee(x * 5) - 2;
    case 3: return x ^ 0x55;
    case 4: return exits_callee(x) * 9;
    case 5: return x - 100;
    case 6: return exits_callee(x + 6) + 6;
    case 7: return x * x;
    default: return -1;
  }
}

// A loop and early returns.
__attribute__((noinline)) long exits_loop(const long *v, long n) {
  long sum = 0;
  for (long i = 0; i < n; i++) {
    if (v[i] < 0) return -i;
    sum += v[i];
  }
  return sum;
}

// Leaves by a conditional jump to another function: a probe there fires whether or not the
// jump is taken, so its returns cannot be told apart.
__asm__(
    ".globl exits_conditional\n"
    ".type exits_conditional, @function\n"
    "exits_conditional:\n"
    "  test %rdi, %rdi\n"
    "  jne exits_callee\n"
    "  xor %eax, %eax\n"
    "  ret\n"
    ".size exits_conditional, .-exits_conditional\n");
long exits_conditional(long x);

int main(int argc, char **argv) {
  long n = argc > 1 ? strtol(argv[1], NULL, 10) : 10;
  long v[4] = {1, 2, 3, n};
  long total = 0;
  for (long i = 0; i < n; i++) total += exits_tail(i * 30) + exits_switch(i % 10);
  total += exits_loop(v, 4) + exits_conditional(n);
  printf("total=%ld\n", total);
  return 0;
}
