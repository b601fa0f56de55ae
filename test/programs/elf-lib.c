// A shared library for the ELF reader's tests (built with -shared -fPIC): exported, protected,
// hidden, weak and static functions and an exported variable.
#include <string.h>

int elf_lib_counter = 1;

__attribute__((noinline)) static int elf_lib_local(int x) {
  return x * 7 + elf_lib_counter;
}

__attribute__((noinline)) int elf_lib_add(int a, int b) {
  return a + b + elf_lib_local(a);
}

__attribute__((noinline, visibility("protected"))) int elf_lib_protected(int x) {
  return x - 1;
}

__attribute__((noinline, visibility("hidden"))) int elf_lib_hidden(int x) {
  return x << 2;
}

__attribute__((noinline, weak)) int elf_lib_weak(const char *s) {
  return (int)strlen(s) + elf_lib_hidden(elf_lib_protected(3));
}
