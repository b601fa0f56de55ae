/*
 * A shared library that late-target.c loads with dlopen() once it is told to: two functions
 * it calls, each counting its own calls (the truth the probe counts are checked against).
 */
static int add_calls;
static int mul_calls;

__attribute__((noipa)) int late_add(int a, int b) {
  add_calls++;
  return a + b;
}

__attribute__((noipa)) long late_mul(long a, long b) {
  mul_calls++;
  return a * b;
}

int late_add_calls(void) { return add_calls; }
int late_mul_calls(void) { return mul_calls; }
