/*
 * A program that exits while its threads are making threads:
 *
 *   clone-churn THREADS MS   starts THREADS threads, each creating and joining a thread that
 *                            does nothing, again and again; main calls mark() MARKS times,
 *                            prints "marks=MARKS", sleeps MS milliseconds and calls exit(0):
 *                            its exit_group kills threads that are stopped for their clone
 *                            event under a tracer
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MARKS 10

volatile int marked;

__attribute__((noinline)) void mark(void) { marked++; }

static void *nothing(void *arg) { return arg; }

static void *churn(void *arg) {
  for (;;) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, nothing, NULL) == 0) pthread_join(thread, NULL);
  }
  return arg;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 16;
  int ms = argc > 2 ? atoi(argv[2]) : 30;
  for (int i = 0; i < threads; i++) {
    pthread_t thread;
    pthread_create(&thread, NULL, churn, NULL);
  }
  for (int i = 0; i < MARKS; i++) mark();
  printf("marks=%d\n", marked);
  fflush(stdout);
  usleep(ms * 1000);
  exit(0);
}
