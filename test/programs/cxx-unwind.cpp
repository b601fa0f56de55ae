// Target for return probes in C++ code an unwinder passes through: `cxx-unwind MODE N`.
//
//   throw N    run() calls level1() -> level2() -> level3() -> leaf() N times; leaf() throws
//              on every third call, through the three levels, and run() catches: the levels
//              keep their own counts of calls and normal returns, and destructors count
//              what the unwind cleaned up
//   cancel N   N times, a thread enters blocked() (through outer()) and waits in a
//              cancellation point until pthread_cancel ends it: the forced unwind runs the
//              destructor of a guard in each of outer() and blocked()
//
// It prints its counts (nothing that depends on timing), so that a probed run can be
// checked against its own account and against an unprobed run's output.
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

static long calls[4], returns[4], cleanups;

struct Guard {
  ~Guard() { cleanups++; }
};

__attribute__((noipa)) long leaf(long i) {
  if (i % 3 == 0) throw std::runtime_error("third");
  return i;
}

__attribute__((noipa)) long level3(long i) {
  calls[3]++;
  Guard guard;
  long r = leaf(i) + 3;
  returns[3]++;
  return r;
}

__attribute__((noipa)) long level2(long i) {
  calls[2]++;
  Guard guard;
  long r = level3(i) * 2;
  returns[2]++;
  return r;
}

__attribute__((noipa)) long level1(long i) {
  calls[1]++;
  Guard guard;
  long r = level2(i) - 1;
  returns[1]++;
  return r;
}

static void run_throw(long n) {
  long sum = 0, caught = 0;
  for (long i = 0; i < n; i++) {
    try {
      sum += level1(i);
    } catch (const std::runtime_error &) {
      caught++;
    }
  }
  std::printf("throw calls=%ld,%ld,%ld returns=%ld,%ld,%ld caught=%ld cleanups=%ld sum=%ld\n",
              calls[1], calls[2], calls[3], returns[1], returns[2], returns[3], caught, cleanups,
              sum);
}

static int pipe_fds[2];
static volatile long entered;

__attribute__((noipa)) long blocked(long i) {
  calls[2]++;
  Guard guard;
  __atomic_add_fetch(&entered, 1, __ATOMIC_SEQ_CST);
  char byte;
  // read() is a cancellation point: pthread_cancel unwinds the thread from here.
  long got = read(pipe_fds[0], &byte, 1);
  returns[2]++;
  return got + i;
}

__attribute__((noipa)) long outer(long i) {
  calls[1]++;
  Guard guard;
  long r = blocked(i);
  returns[1]++;
  return r;
}

static void *thread_main(void *arg) { return (void *)outer((long)arg); }

static void run_cancel(long n) {
  if (pipe(pipe_fds) != 0) {
    std::perror("pipe");
    std::exit(1);
  }
  long cancelled = 0;
  for (long i = 0; i < n; i++) {
    pthread_t thread;
    long before = __atomic_load_n(&entered, __ATOMIC_SEQ_CST);
    pthread_create(&thread, nullptr, thread_main, (void *)i);
    while (__atomic_load_n(&entered, __ATOMIC_SEQ_CST) == before) usleep(1000);
    pthread_cancel(thread);
    void *result;
    pthread_join(thread, &result);
    if (result == PTHREAD_CANCELED) cancelled++;
  }
  std::printf("cancel calls=%ld,%ld returns=%ld,%ld cancelled=%ld cleanups=%ld\n", calls[1],
              calls[2], returns[1], returns[2], cancelled, cleanups);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: cxx-unwind throw|cancel N\n");
    return 2;
  }
  long n = std::strtol(argv[2], nullptr, 10);
  if (std::strcmp(argv[1], "throw") == 0) {
    run_throw(n);
  } else if (std::strcmp(argv[1], "cancel") == 0) {
    run_cancel(n);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
  }
  return 0;
}
