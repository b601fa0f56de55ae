// The other twin(int) of untimed-calls.cpp: a static function that returns as any does.
static int twins;

__attribute__((noinline)) static int twin(int x) {
  twins++;
  return x + twins;
}

__attribute__((noinline)) int call_c_twin(int x) { return twin(x) - twins + 1; }
