// Target for probes on IFUNCs (libc's strlen and memset): `ifunc-calls N LENGTH` fills a
// buffer of LENGTH+1 bytes with memset and measures a string of LENGTH bytes with strlen, N
// times each, through the PLT (the implementations libc's resolvers picked for this CPU),
// and prints how many it measured and their total length. -fno-builtin keeps gcc from
// working out strlen and memset itself.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000;
  long length = argc > 2 ? atol(argv[2]) : 73;
  char *text = calloc(length + 1, 1);
  memset(text, 'x', length);
  char *buffer = malloc(length + 1);
  volatile size_t total = 0;
  for (long i = 0; i < n; i++) {
    memset(buffer, 'y', length + 1);
    total += strlen(text);
  }
  printf("calls=%ld total=%zu\n", n, (size_t)total);
  free(buffer);
  free(text);
  return 0;
}
