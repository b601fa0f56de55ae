// Calls of functions whose returns cannot be found safely: leaves_oddly and one of the two
// twin(int)s leave by a conditional jump into the middle of another function (helper), which
// a probe at the jump cannot tell taken from not taken. The other twin(int) (a static
// function of untimed-twin.c) returns as any function does. Prints its own counts.
#include <cstdio>
#include <cstdlib>

extern "C" int leaves_oddly(int);
int call_asm_twin(int);
int call_c_twin(int);

// _ZL4twini is a file-local twin(int), as the C++ compiler names a static one.
__asm__(".text\n"
        ".globl leaves_oddly\n"
        ".type leaves_oddly, @function\n"
        "leaves_oddly:\n"
        "  test %edi, %edi\n"
        "  jne shared_tail\n"
        "  mov $1, %eax\n"
        "  ret\n"
        ".size leaves_oddly, .-leaves_oddly\n"
        ".type _ZL4twini, @function\n"
        "_ZL4twini:\n"
        "  test %edi, %edi\n"
        "  jne shared_tail\n"
        "  mov $3, %eax\n"
        "  ret\n"
        ".size _ZL4twini, .-_ZL4twini\n"
        ".globl helper\n"
        ".type helper, @function\n"
        "helper:\n"
        "  mov $7, %eax\n"
        "shared_tail:\n"
        "  add $5, %eax\n"
        "  ret\n"
        ".size helper, .-helper\n"
        ".globl _Z13call_asm_twini\n"
        ".type _Z13call_asm_twini, @function\n"
        "_Z13call_asm_twini:\n"
        "  jmp _ZL4twini\n"
        ".size _Z13call_asm_twini, .-_Z13call_asm_twini\n");

static int outers, afters;

__attribute__((noinline)) int after(int x) {
  afters++;
  return x * 2;
}

__attribute__((noinline)) int outer(int x) {
  outers++;
  int a = leaves_oddly(x);
  return after(a) + call_asm_twin(x) + call_c_twin(x);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 5;
  int sum = 0;
  for (int i = 0; i < n; i++) sum += outer(i);
  printf("{\"outer\": %d, \"after\": %d, \"sum\": %d}\n", outers, afters, sum);
  return 0;
}
