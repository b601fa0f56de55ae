// A process under a seccomp filter, as hardened programs run: `kill` kills the process at an
// mmap() or mprotect() asking for executable memory (OpenSSH's sandbox lets no PROT_EXEC
// through), `errno` fails those calls with EPERM (systemd's MemoryDenyWriteExecute=yes),
// `other` refuses only uname(), which leaves upscope's calls alone. Then it calls tick() every
// 10 ms until killed, printing "ready" once the filter is installed and `ticks=N` at SIGTERM.
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile long ticks;
static volatile sig_atomic_t done;

__attribute__((noinline)) void tick(void) { ticks++; }

static void on_term(int sig) {
  (void)sig;
  done = 1;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "kill";
  unsigned refuse = strcmp(mode, "kill") == 0 ? SECCOMP_RET_KILL_PROCESS : (SECCOMP_RET_ERRNO | EPERM);
  struct sock_filter exec_memory[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mmap, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mprotect, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, refuse),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_filter uname_only[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_uname, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog;
  if (strcmp(mode, "other") == 0) {
    prog.len = sizeof uname_only / sizeof uname_only[0];
    prog.filter = uname_only;
  } else {
    prog.len = sizeof exec_memory / sizeof exec_memory[0];
    prog.filter = exec_memory;
  }
  signal(SIGTERM, on_term);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    perror("seccomp");
    return 1;
  }
  printf("ready\n");
  fflush(stdout);
  while (!done) {
    tick();
    usleep(10000);
  }
  printf("ticks=%ld\n", ticks);
  return 0;
}
