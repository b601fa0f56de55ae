/*
 * Blocks an exec releases: `leaks-exec before` leaks BEFORE blocks of 4242 bytes through
 * before_exec(), then execs itself as `leaks-exec after`, which leaks AFTER blocks of 1234
 * bytes through after_exec() and exits. The exec takes the first program's memory with it:
 * only the second one's blocks are outstanding at the end. No stdio (its buffer would be a
 * block of each).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BEFORE 5
#define AFTER 3

static void *kept[BEFORE + AFTER];

__attribute__((noinline)) void *before_exec(void) { return malloc(4242); }

__attribute__((noinline)) void *after_exec(void) { return malloc(1234); }

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "after") == 0) {
    for (int i = 0; i < AFTER; i++) kept[i] = after_exec();
    return 0;
  }
  for (int i = 0; i < BEFORE; i++) kept[i] = before_exec();
  char *again[] = {argv[0], "after", NULL};
  execv(argv[0], again);
  return 1;
}
