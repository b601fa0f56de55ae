// Torture target for the ptrace engine: 8 threads call counted() CALLS_PER_THREAD times each
// (1,000,000 in all by default), some of those calls recurse, some longjmp out of a nested
// call, some throw a C++ exception through probed frames; then the process forks a child that
// calls counted() untraced and execs /bin/true. Every call counts itself, and the program
// prints its counts and a checksum that does not depend on thread timing.
#include <pthread.h>
#include <setjmp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

static std::atomic<long> calls{0};
static std::atomic<long> checksum{0};
static std::atomic<long> caught{0};
static std::atomic<long> jumped{0};
static long per_thread = 125000;
static thread_local jmp_buf env;

extern "C" __attribute__((noipa)) long counted(long n, long depth) {
  calls.fetch_add(1, std::memory_order_relaxed);
  if (depth > 0) {
    long r = counted(n, depth - 1);
    __asm__ volatile("" : "+r"(r));  // a real recursion, not a loop
    return r + 1;
  }
  if (n % 1000 == 7) throw std::runtime_error("seven");
  if (n % 1000 == 9) longjmp(env, 1);
  return n & 0xff;
}

static void *worker(void *arg) {
  long base = (long)arg * per_thread;
  long sum = 0;
  for (long i = 0; i < per_thread; i++) {
    long n = base + i;
    long depth = n % 100 == 0 ? 5 : 0;
    if (setjmp(env) != 0) {
      jumped.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    try {
      sum += counted(n, depth);
    } catch (const std::runtime_error &) {
      caught.fetch_add(1, std::memory_order_relaxed);
    }
  }
  checksum.fetch_add(sum, std::memory_order_relaxed);
  return nullptr;
}

int main(int argc, char **argv) {
  if (argc > 1) per_thread = std::atol(argv[1]);
  pthread_t threads[8];
  for (long t = 0; t < 8; t++) pthread_create(&threads[t], nullptr, worker, (void *)t);
  for (long t = 0; t < 8; t++) pthread_join(threads[t], nullptr);
  std::printf("calls=%ld checksum=%ld caught=%ld jumped=%ld\n", calls.load(), checksum.load(),
              caught.load(), jumped.load());
  std::fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    long before = calls.load();
    for (long i = 0; i < 1000; i++) counted(i * 1000 + 1, 0);
    std::printf("child calls=%ld\n", calls.load() - before);
    std::fflush(stdout);
    execl("/bin/true", "true", (char *)nullptr);
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("child exit=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}
