/*
 * Target for thread names at the time of each hit: started before the trace, it waits for
 * SIGUSR1 (sent once the tracer is attached), calls name_call() 3 times under its own name,
 * renames itself (prctl PR_SET_NAME "renamed"), calls name_call() 2 more times, then execs
 * `sleep 1` (another name again). It prints each name it runs under, as /proc shows it, with
 * the calls made under it: `name NAME CALLS`, then `exec` just before the exec.
 */
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

volatile long sink;

__attribute__((noipa)) long name_call(long i) { return i + 1; }

static void say_name(int calls) {
  char name[32] = "";
  FILE *f = fopen("/proc/self/comm", "r");
  if (f != NULL) {
    if (fgets(name, sizeof name, f) == NULL) name[0] = '\0';
    fclose(f);
  }
  for (char *c = name; *c != '\0'; c++)
    if (*c == '\n') *c = '\0';
  printf("name %s %d\n", name, calls);
}

int main(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigprocmask(SIG_BLOCK, &set, NULL);
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("ready\n");
  int sig;
  sigwait(&set, &sig);
  for (long i = 0; i < 3; i++) sink += name_call(i);
  say_name(3);
  prctl(PR_SET_NAME, "renamed", 0, 0, 0);
  for (long i = 0; i < 2; i++) sink += name_call(i);
  say_name(2);
  printf("exec\n");
  execl("/bin/sleep", "sleep", "1", (char *)NULL);
  return 1;
}
