// Prints where the dynamic linker resolved libc's IFUNCs strlen, memset and memcpy in this
// process: `NAME 0xOFFSET`, the implementation's address less libc's load address (its vaddr
// in the file, libc's first segment being at 0), as dladdr gives the base.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static void show(const char *name, void *resolved) {
  Dl_info info;
  if (dladdr(resolved, &info) == 0) return;
  printf("%s 0x%lx\n", name, (unsigned long)((char *)resolved - (char *)info.dli_fbase));
}

int main(void) {
  // Through volatile pointers: the addresses the GOT holds, not a builtin's.
  void *volatile strlen_at = (void *)strlen;
  void *volatile memset_at = (void *)memset;
  void *volatile memcpy_at = (void *)memcpy;
  show("strlen", strlen_at);
  show("memset", memset_at);
  show("memcpy", memcpy_at);
  return 0;
}
