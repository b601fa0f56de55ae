// Target for probes on an IFUNC (libc's strlen): `ifunc-calls N LENGTH` measures a string of
// LENGTH bytes N times with strlen, through the PLT (the implementation libc's resolver
// picked for this CPU), and prints how many it measured and their total length. -fno-builtin
// keeps gcc from working out strlen itself.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000;
  long length = argc > 2 ? atol(argv[2]) : 73;
  char *text = calloc(length + 1, 1);
  memset(text, 'x', length);
  volatile size_t total = 0;
  for (long i = 0; i < n; i++) total += strlen(text);
  printf("calls=%ld total=%zu\n", n, (size_t)total);
  free(text);
  return 0;
}
