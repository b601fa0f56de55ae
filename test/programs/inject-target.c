// A target for the inject engine: THREADS threads each call hooked() CALLS times, with
// arguments of every width (two of them passed on the stack), and count their calls
// themselves; the totals are printed at the end, the truth the tests compare with.
//   inject-target THREADS CALLS [DELAY_MS [ROUNDS [PAUSE_MS]]]
// DELAY_MS: sleep before the calls (to attach with -p first); ROUNDS: repeat the calls
// (with a pause of PAUSE_MS, default 20, between rounds) so that a run lasts; 0: until
// SIGUSR1. With few calls and no pause, threads start and end all the time.
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_long hooked_calls;
static atomic_long looper_calls;
static atomic_long tiny_calls;
static volatile long sink;
static long calls_per_thread;
static int rounds = 1;
static volatile sig_atomic_t stop;

static void on_usr1(int sig) {
  (void)sig;
  stop = 1;
}

__attribute__((noinline)) long hooked(int8_t a, int16_t b, int32_t c, int64_t d, uint8_t e,
                                      uint64_t f, int32_t g, int64_t h) {
  atomic_fetch_add_explicit(&hooked_calls, 1, memory_order_relaxed);
  return a + b + c + d + e + (long)f + g + h;
}

// A loop whose jump lands on its second instruction, inside the first 5 bytes: an inline
// hook cannot patch it (the int3 path serves it).
long looper(int n);
__asm__(".text\n.globl looper\n.type looper,@function\nlooper:\n"
        "  mov %edi,%eax\n"    // 2 bytes
        "1: dec %eax\n"        // 2 bytes: the jump below lands here (looper+2)
        "  jg 1b\n"
        "  ret\n"
        ".size looper, .-looper\n");

// Too short to hold a 5-byte jump: one `ret` (then padding that is not its own).
void tiny(void);
__asm__(".text\n.globl tiny\n.type tiny,@function\ntiny:\n  ret\n.size tiny, .-tiny\n");

static void *run(void *arg) {
  long id = (long)arg;
  for (long i = 0; i < calls_per_thread; i++) {
    sink += hooked((int8_t)(-1 - (i & 7)), (int16_t)-300, (int32_t)-70000 - (int32_t)id,
                   -5000000000LL - id, (uint8_t)250, 0xfedcba9876543210ULL, 123456789,
                   -1234567890123LL);
    if ((i & 1023) == 0) {
      sink += looper(3);
      atomic_fetch_add_explicit(&looper_calls, 1, memory_order_relaxed);
      tiny();
      atomic_fetch_add_explicit(&tiny_calls, 1, memory_order_relaxed);
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 4;
  calls_per_thread = argc > 2 ? atol(argv[2]) : 100000;
  long delay_ms = argc > 3 ? atol(argv[3]) : 0;
  rounds = argc > 4 ? atoi(argv[4]) : 1;
  long pause_ms = argc > 5 ? atol(argv[5]) : 20;
  if (delay_ms > 0) {
    printf("ready %d\n", getpid());
    fflush(stdout);
    struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  signal(SIGUSR1, on_usr1);
  int done = 0;
  for (int r = 0; rounds == 0 ? !stop : r < rounds; r++, done++) {
    pthread_t t[64];
    for (long i = 0; i < threads && i < 64; i++) pthread_create(&t[i], NULL, run, (void *)i);
    for (long i = 0; i < threads && i < 64; i++) pthread_join(t[i], NULL);
    if (pause_ms > 0 && (rounds == 0 || r + 1 < rounds)) {
      struct timespec ts = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
  printf("hooked %ld looper %ld tiny %ld\n", atomic_load(&hooked_calls),
         atomic_load(&looper_calls), atomic_load(&tiny_calls));
  printf("rounds %d\n", done);
  return 0;
}
