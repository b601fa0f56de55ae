// A target that forks, spawns or execs while its threads call a hooked function:
//   inject-forks MODE THREADS CALLS FORKS [CHILD_CALLS]
// THREADS threads each call hooked() CALLS times, then once a millisecond until the main
// thread is done; meanwhile the main thread, FORKS times:
//   fork:  calls forker(), which forks: the child returns from forker() too (0), calls
//          hooked() CHILD_CALLS times (default 1000), prints `child K calls C sum S` (S is
//          C squared: hooked(i) returns 2i + 1) and exits 0; the parent waits for it and
//          prints `child K status exit:N` (or `signal:N`)
//   spawn: calls forker(), which runs /bin/true with posix_spawn (a vfork: the child shares
//          the parent's memory until its exec) and waits for it: `spawned K status exit:N`
//   exec:  (once, FORKS ignored) prints `exec`, then execs /bin/sh printing `after exec` and
//          exiting with 3, while the threads are still calling
// Then `calls C mismatches M forker F`: its own calls of hooked(), those that did not return
// 2i + 1, and its calls of forker().
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static atomic_long calls, forker_calls, mismatches;
static atomic_int main_done;
static long per_thread, child_calls = 1000;
static const char *mode;

__attribute__((noinline, noipa)) long hooked(long i) {
  atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
  return 2 * i + 1;
}

__attribute__((noinline, noipa)) pid_t forker(long k) {
  atomic_fetch_add_explicit(&forker_calls, 1, memory_order_relaxed);
  if (strcmp(mode, "spawn") == 0) {
    char *argv[] = {"true", NULL};
    pid_t pid;
    if (posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ) != 0) return -1;
    return pid;
  }
  (void)k;
  return fork();
}

static void *run(void *arg) {
  (void)arg;
  for (long i = 0; i < per_thread || !atomic_load(&main_done); i++) {
    if (hooked(i) != 2 * i + 1) atomic_fetch_add(&mismatches, 1);
    if (i >= per_thread) {
      struct timespec ms = {0, 1000000L};
      nanosleep(&ms, NULL);
    }
  }
  return NULL;
}

static void status_line(const char *what, long k, int status) {
  if (WIFEXITED(status))
    printf("%s %ld status exit:%d\n", what, k, WEXITSTATUS(status));
  else
    printf("%s %ld status signal:%d\n", what, k, WTERMSIG(status));
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s fork|spawn|exec THREADS CALLS FORKS [CHILD_CALLS]\n", argv[0]);
    return 2;
  }
  mode = argv[1];
  int threads = atoi(argv[2]);
  per_thread = atol(argv[3]);
  long forks = atol(argv[4]);
  if (argc > 5) child_calls = atol(argv[5]);
  setvbuf(stdout, NULL, _IOLBF, 0);
  pthread_t t[64];
  for (int i = 0; i < threads && i < 64; i++) pthread_create(&t[i], NULL, run, NULL);
  if (strcmp(mode, "exec") == 0) {
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
    printf("exec\n");
    execl("/bin/sh", "sh", "-c", "echo after exec; exit 3", (char *)NULL);
    perror("execl");
    return 4;
  }
  for (long k = 0; k < forks; k++) {
    pid_t pid = forker(k);
    if (pid == 0) {
      // The child: the forking thread alone, hooked() called as the parent's threads do.
      long c = 0, s = 0;
      for (long i = 0; i < child_calls; i++, c++) s += hooked(i);
      printf("child %ld calls %ld sum %ld\n", k, c, s);
      exit(0);
    }
    if (pid < 0) {
      perror("fork");
      return 5;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    status_line(strcmp(mode, "spawn") == 0 ? "spawned" : "child", k, status);
  }
  atomic_store(&main_done, 1);
  for (int i = 0; i < threads && i < 64; i++) pthread_join(t[i], NULL);
  printf("calls %ld mismatches %ld forker %ld\n", atomic_load(&calls), atomic_load(&mismatches),
         atomic_load(&forker_calls));
  return 0;
}
