/*
 * Target for the --output tests: calls busy_tick() about 20000 times a second, forever, and
 * writes its own count of calls (`n=N`) every 500 calls, so a test can see that it keeps
 * running, unharmed, while and after a tracer attaches, fails and detaches.
 */
#include <stdio.h>
#include <unistd.h>

volatile long sink;

__attribute__((noipa)) long busy_tick(long i) { return i * 2 + 1; }

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (long n = 1;; n++) {
    sink += busy_tick(n);
    if (n % 500 == 0) printf("n=%ld\n", n);
    usleep(50);
  }
}
