// A small program for the ELF reader's tests: globals of several kinds (data, bss, TLS,
// rodata), static, weak and hidden functions, and calls into libc so that .dynsym holds
// versioned references (malloc@GLIBC_2.2.5, ...).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int elf_counter = 3;
static int elf_hidden_state;
__thread int elf_tls_value = 7;
const char elf_banner[] = "upscope elf test";

__attribute__((noinline)) static int elf_static_helper(int x) {
  return x * 3 + elf_hidden_state;
}

__attribute__((noinline)) int elf_add(int a, int b) {
  return a + b + elf_static_helper(a);
}

__attribute__((noinline, weak)) int elf_weak_hook(int x) {
  return x + 1;
}

__attribute__((noinline, visibility("hidden"))) int elf_hidden_function(int x) {
  return x ^ 0x5a;
}

int main(int argc, char **argv) {
  char *copy = malloc(64);
  if (copy == NULL) return 1;
  strncpy(copy, argv[0], 63);
  copy[63] = '\0';
  elf_hidden_state = (int)strlen(copy);
  printf("%s %d %d\n", elf_banner, elf_add(argc, elf_counter),
         elf_weak_hook(elf_hidden_function(elf_tls_value)));
  free(copy);
  return 0;
}
