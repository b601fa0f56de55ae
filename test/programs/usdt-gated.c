/*
 * The semaphore half of usdt-target.c (sdt.h decides semaphores per translation unit): probe
 * `usdt:gated` with a semaphore, which tracers raise while the probe is attached. The target
 * counts the calls at which it was raised.
 */
#define _SDT_HAS_SEMAPHORES 1
unsigned short usdt_gated_semaphore __attribute__((unused, section(".probes")));
#include <stdio.h>
#include <sys/sdt.h>

long gated_enabled;

__attribute__((noipa)) void gated(long i) {
  int enabled = usdt_gated_semaphore != 0;
  if (enabled) gated_enabled++;
  STAP_PROBE2(usdt, gated, i, enabled);
  printf("gated %ld %d\n", i, enabled);
}
