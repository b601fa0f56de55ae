/*
 * Target for process-resolution tests: prints the runtime address of tgt_marker() and its own
 * pid, then sleeps until killed.
 */
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) int tgt_marker(int x) { return x * 3 + 1; }

int main(void) {
  printf("%p %d\n", (void *)tgt_marker, (int)getpid());
  fflush(stdout);
  for (;;) pause();
  return tgt_marker(0);
}
