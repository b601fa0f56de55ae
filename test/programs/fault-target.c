/*
 * Target for the fault tests of the ptrace engine: `fault-target CALLS USEC [plain|fork|exec]`
 * prints `pid=N`, then calls fault_tick() and fault_tock() CALLS times each, sleeping USEC
 * microseconds between turns (0: a flood of hits), and prints its own count of calls and the
 * sum of what fault_tick() returned: `calls=N sum=S`. fault_tick(i) returns 2i+1, so an
 * unharmed run's sum is CALLS squared; a breakpoint left behind kills it with SIGTRAP, and a
 * return address left pointing at a trampoline with SIGSEGV.
 *
 * CALLS 0: until SIGUSR1 comes (then the line is printed as for a run of that many calls).
 *
 * fork: half way, a child is forked that makes the other half of the calls too and prints
 * `child calls=N sum=S`; the parent waits for it and prints `child status=exit:0` (or
 * `signal:N`) before its own line. exec: half way, the program prints `before-exec calls=N
 * sum=S` and execs itself for the other half (`plain`), which prints its own line.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static long calls;
static volatile sig_atomic_t stop;

static void on_usr1(int signal) {
  (void)signal;
  stop = 1;
}
static long tocks;

__attribute__((noinline, noipa)) long fault_tick(long i) {
  calls++;
  return 2 * i + 1;
}

__attribute__((noinline, noipa)) void fault_tock(void) { tocks++; }

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s CALLS USEC [plain|fork|exec]\n", argv[0]);
    return 2;
  }
  long total = atol(argv[1]);
  long usec = atol(argv[2]);
  const char *mode = argc > 3 ? argv[3] : "plain";
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGUSR1, on_usr1);
  printf("pid=%d\n", (int)getpid());
  long sum = 0;
  pid_t child = 0;
  for (long i = 0; total == 0 ? !stop : i < total; i++) {
    if (i == total / 2 && strcmp(mode, "fork") == 0) {
      child = fork();
      if (child == 0) {
        for (long j = i; j < total; j++) {
          sum += fault_tick(j);
          fault_tock();
          if (usec > 0) usleep(usec);
        }
        printf("child calls=%ld sum=%ld tocks=%ld\n", calls, sum, tocks);
        return 0;
      }
    }
    if (i == total / 2 && strcmp(mode, "exec") == 0) {
      printf("before-exec calls=%ld sum=%ld tocks=%ld\n", calls, sum, tocks);
      char rest[32];
      snprintf(rest, sizeof rest, "%ld", total - i);
      execl("/proc/self/exe", argv[0], rest, argv[2], "plain", (char *)NULL);
      perror("execl");
      return 3;
    }
    sum += fault_tick(i);
    fault_tock();
    if (usec > 0) usleep(usec);
  }
  if (child > 0) {
    int status = 0;
    waitpid(child, &status, 0);
    if (WIFEXITED(status))
      printf("child status=exit:%d\n", WEXITSTATUS(status));
    else
      printf("child status=signal:%d\n", WTERMSIG(status));
  }
  printf("calls=%ld sum=%ld tocks=%ld\n", calls, sum, tocks);
  return 0;
}
