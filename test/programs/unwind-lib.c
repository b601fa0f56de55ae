/*
 * The library of unwind-app: a frame between two of the program's, built as the program is
 * (-O2 -fomit-frame-pointer), so that a stack walked by frame pointers loses its callers.
 */
long unwind_lib_mid(long v, long (*callback)(long)) {
  long r = callback(v) * 3;
  __asm__ volatile("");
  return r + 1;
}
