// A thread waits in wait_here() until the process ends; main calls work() 3 times and exits,
// which ends the thread in wait_here: a call that never returned, and that no unwind left.
// Prints its own counts as JSON.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile int started;

__attribute__((noinline)) int wait_here(void) {
  started = 1;
  while (pause() != -2) {
  }
  return 1;
}

static void *waiter(void *arg) {
  (void)arg;
  wait_here();
  return NULL;
}

__attribute__((noinline)) int work(int x) { return x * 2; }

int main(void) {
  pthread_t thread;
  pthread_create(&thread, NULL, waiter, NULL);
  while (!started) usleep(1000);
  int sum = 0;
  for (int i = 0; i < 3; i++) sum += work(i);
  printf("{\"work\": 3, \"wait_here\": 1, \"sum\": %d}\n", sum);
  fflush(stdout);
  exit(0);
}
