/*
 * Target for `upscope record`: a known call structure, with its own count of every call.
 *
 *   calls-target all    runs, from main: rec(50) (recursion 51 calls deep), is_even(20)
 *                       (mutual recursion with is_odd), 4 threads each running
 *                       thread_body -> leaf x THREAD_LEAVES, jumper -> deep x 6 with a longjmp
 *                       from the innermost deep back to jumper, tail_caller -> tail_callee
 *                       (a jump at -O2), and a fork whose child runs child_work x CHILD_CALLS;
 *                       then prints its counters and argc as JSON (the child its own line)
 *   calls-target exit   main -> quitter -> ender, which calls exit(0) (printing first)
 *   calls-target deep N main -> rec(N): a recursion N + 1 calls deep; prints rec's count
 *   calls-target loop N [SPINS]  main -> rec(N) again and again, until killed; with SPINS,
 *                       rec(0) spins that many times first (the calls under way at any
 *                       moment are then N + 1 deep, nearly always)
 *   calls-target spin   prints "ready", waits for SIGUSR1, then starts a thread that runs
 *                       spinner -> rec(2) and leaf (libc's pthread_mutex_lock and unlock) again
 *                       and again, until killed: a call entered after the probes that never
 *                       returns, calling probed functions of two files
 *   calls-target spin-fork  the same, but after SIGUSR1 forks a child that runs spinner, and
 *                       300 ms later another that runs brief -> (rec(2) and leaf) x BRIEF_CALLS
 *                       and exits; prints "brief ended" once it is reaped, then waits for ever
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noipa))
#define THREADS 4
#define THREAD_LEAVES 5
#define CHILD_CALLS 3
#define BRIEF_CALLS 1000

static long n_rec, n_even, n_odd, n_leaf, n_body, n_deep, n_jumper, n_tail_caller, n_tail_callee,
    n_child, n_quitter, n_ender;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static jmp_buf jump;
volatile long sink;
static long leaf_spins;

NOINLINE long rec(long n) {
  n_rec++;
  if (n == 0) {
    for (long i = 0; i < leaf_spins; i++) sink = i;
    return 0;
  }
  long r = rec(n - 1) + 1;
  sink = r;
  return r;
}

NOINLINE int is_odd(long n);
NOINLINE int is_even(long n) {
  n_even++;
  int r = n == 0 ? 1 : is_odd(n - 1);
  sink = r;
  return r;
}
NOINLINE int is_odd(long n) {
  n_odd++;
  int r = n == 0 ? 0 : is_even(n - 1);
  sink = r;
  return r;
}

NOINLINE void leaf(void) {
  pthread_mutex_lock(&lock);
  n_leaf++;
  pthread_mutex_unlock(&lock);
}

NOINLINE void *thread_body(void *arg) {
  pthread_mutex_lock(&lock);
  n_body++;
  pthread_mutex_unlock(&lock);
  for (int i = 0; i < THREAD_LEAVES; i++) leaf();
  return arg;
}

NOINLINE void deep(int n) {
  n_deep++;
  if (n == 0) longjmp(jump, 1);
  deep(n - 1);
  sink = n;
}

NOINLINE void jumper(void) {
  n_jumper++;
  if (setjmp(jump) == 0) deep(5);
  sink = 0;
}

NOINLINE long tail_callee(long x) {
  n_tail_callee++;
  sink = x;
  return x * 3;
}

/* At -O2 the call is a jump (a sibling call): tail_callee returns for it. */
NOINLINE long tail_caller(long x) {
  n_tail_caller++;
  return tail_callee(x + 1);
}

NOINLINE void child_work(void) { n_child++; }

NOINLINE void *spinner(void *arg) {
  for (;;) {
    rec(2);
    leaf();
  }
  return arg;
}

NOINLINE void brief(void) {
  for (int i = 0; i < BRIEF_CALLS; i++) {
    rec(2);
    leaf();
  }
}

NOINLINE void ender(void) {
  n_ender++;
  printf("{\"quitter\":%ld,\"ender\":%ld}\n", n_quitter, n_ender);
  fflush(stdout);
  exit(0);
}

NOINLINE void quitter(void) {
  n_quitter++;
  ender();
  sink = 1;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "exit") == 0) {
    quitter();
    return 1;
  }
  if (argc > 2 && strcmp(argv[1], "loop") == 0) {
    if (argc > 3) leaf_spins = atol(argv[3]);
    for (;;) rec(atol(argv[2]));
  }
  if (argc > 1 && (strcmp(argv[1], "spin") == 0 || strcmp(argv[1], "spin-fork") == 0)) {
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    printf("ready\n");
    fflush(stdout);
    int sig;
    sigwait(&usr1, &sig);
    if (strcmp(argv[1], "spin") == 0) {
      pthread_t thread;
      pthread_create(&thread, NULL, spinner, NULL);
      pthread_join(thread, NULL);
    }
    if (fork() == 0) spinner(NULL);
    usleep(300000);
    pid_t short_lived = fork();
    if (short_lived == 0) {
      brief();
      _exit(0);
    }
    waitpid(short_lived, NULL, 0);
    printf("brief ended\n");
    fflush(stdout);
    for (;;) pause();
  }
  if (argc > 2 && strcmp(argv[1], "deep") == 0) {
    rec(atol(argv[2]));
    printf("{\"rec\":%ld}\n", n_rec);
    return 0;
  }
  rec(50);
  is_even(20);
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, thread_body, NULL);
  for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
  jumper();
  sink = tail_caller(4);
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    for (int i = 0; i < CHILD_CALLS; i++) child_work();
    printf("{\"pid\":%d,\"child_work\":%ld}\n", getpid(), n_child);
    fflush(stdout);
    _exit(0);
  }
  waitpid(child, NULL, 0);
  printf("{\"pid\":%d,\"argc\":%d,\"rec\":%ld,\"is_even\":%ld,\"is_odd\":%ld,\"thread_body\":%ld,\"leaf\":%ld,"
         "\"jumper\":%ld,\"deep\":%ld,\"tail_caller\":%ld,\"tail_callee\":%ld,\"child_work\":%ld}\n",
         getpid(), argc, n_rec, n_even, n_odd, n_body, n_leaf, n_jumper, n_deep, n_tail_caller,
         n_tail_callee, n_child);
  return 0;
}
