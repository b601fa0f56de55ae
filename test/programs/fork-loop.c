/*
 * Target for attaching to a process in the middle of its forks: `fork-loop` prints `pid=N`,
 * then forks children that exit at once with status 7, and waits for each, until SIGUSR1
 * comes; then it prints `forks=N bad=B` (B: children that did not end with status 7) and
 * exits 0.
 */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_usr1(int signal) {
  (void)signal;
  stop = 1;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGUSR1, on_usr1);
  printf("pid=%d\n", (int)getpid());
  long forks = 0;
  long bad = 0;
  while (!stop) {
    pid_t child = fork();
    if (child == 0) _exit(7);
    if (child < 0) continue;
    forks++;
    int status = 0;
    while (waitpid(child, &status, 0) < 0) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 7) bad++;
  }
  printf("forks=%ld bad=%ld\n", forks, bad);
  return 0;
}
