/* A shared library for the trace tests: one exported function the program calls. */
__attribute__((noipa)) int lib_add(int a, int b) { return a + b; }
