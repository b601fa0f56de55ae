// A target whose signal handler calls the probed function while the interrupted thread is
// itself inside it: SIGALRM every 200 us (setitimer), a handler that calls hooked(); the
// thread calls hooked() CALLS times (more until the handler has interrupted a call of it
// NESTED times), and counts every call and return itself, handler's included:
//   inject-signals MODE CALLS [NESTED]
// MODE: stack (the handler runs on the thread's stack), altstack (on an alternate signal
// stack below the thread's stack: the main thread's, with one mmap'ed), altstack-above (on
// an alternate stack above the thread's: a thread whose stack was mapped after it). Prints
// `altstack above|below` for the alternate stack modes, then
// `calls C returns R handled H nested N sum S handler-sum T`: hooked(i) returns 3i + 1, so
// S is the sum of 3i + 1 for i below the thread's calls, T for the handler's i (1000000 +
// k for its k-th call, from 0).
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>

#define ALTSTACK_BYTES (256 * 1024)

static atomic_long calls, returns, handled, nested;
static long handler_sum;
static _Thread_local volatile int depth;
static volatile long sink;

__attribute__((noinline, noipa)) long hooked(long i) {
  atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
  depth++;
  // Long enough that most signals come while a call is in here.
  for (int k = 0; k < 2000; k++) sink += k ^ i;
  depth--;
  atomic_fetch_add_explicit(&returns, 1, memory_order_relaxed);
  return 3 * i + 1;
}

static void on_alarm(int sig) {
  (void)sig;
  if (depth > 0) atomic_fetch_add_explicit(&nested, 1, memory_order_relaxed);
  long k = atomic_fetch_add_explicit(&handled, 1, memory_order_relaxed);
  handler_sum += hooked(1000000 + k);
}

static long total_calls, want_nested;
static void *altstack;

static void *run(void *arg) {
  (void)arg;
  if (altstack != NULL) {
    stack_t ss = {.ss_sp = altstack, .ss_size = ALTSTACK_BYTES, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
      perror("sigaltstack");
      exit(3);
    }
    int here;
    printf("altstack %s\n", (char *)altstack > (char *)&here ? "above" : "below");
    fflush(stdout);
  }
  sigset_t alarm;
  sigemptyset(&alarm);
  sigaddset(&alarm, SIGALRM);
  pthread_sigmask(SIG_UNBLOCK, &alarm, NULL);
  long sum = 0;
  for (long i = 0; i < total_calls || atomic_load(&nested) < want_nested; i++) {
    sum += hooked(i);
  }
  // No more alarms: the counts are final.
  pthread_sigmask(SIG_BLOCK, &alarm, NULL);
  return (void *)sum;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s stack|altstack|altstack-above CALLS [NESTED]\n", argv[0]);
    return 2;
  }
  const char *mode = argv[1];
  total_calls = atol(argv[2]);
  want_nested = argc > 3 ? atol(argv[3]) : 0;
  int on_thread = strcmp(mode, "altstack-above") == 0;
  if (strcmp(mode, "stack") != 0) {
    // Mapped before the thread's stack (if any): above it, as mmap goes down.
    altstack = mmap(NULL, ALTSTACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                    -1, 0);
    if (altstack == MAP_FAILED) return 3;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART | (altstack != NULL ? SA_ONSTACK : 0);
  sigaction(SIGALRM, &sa, NULL);
  sigset_t alarm;
  sigemptyset(&alarm);
  sigaddset(&alarm, SIGALRM);
  // Only the calling thread takes the alarms.
  pthread_sigmask(SIG_BLOCK, &alarm, NULL);
  struct itimerval every = {{0, 200}, {0, 200}};
  setitimer(ITIMER_REAL, &every, NULL);
  void *sum;
  if (on_thread) {
    pthread_t thread;
    pthread_create(&thread, NULL, run, NULL);
    pthread_join(thread, &sum);
  } else {
    sum = run(NULL);
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  printf("calls %ld returns %ld handled %ld nested %ld sum %ld handler-sum %ld\n",
         atomic_load(&calls), atomic_load(&returns), atomic_load(&handled),
         atomic_load(&nested), (long)sum, handler_sum);
  return 0;
}
