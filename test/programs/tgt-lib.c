/* A tiny shared library for target-resolution tests (built with -shared -fPIC -Wl,-soname,...). */
int tgt_lib_value(int x) { return x * 2 + 1; }
