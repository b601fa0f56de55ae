/*
 * upscope's bundled sample: a tiny request handler that parses lines like "GET /index 42",
 * hashes the path, allocates a response and frees it. It is the program `npm run demo`
 * probes. Usage: app [ROUNDS] (default 5; 0 = run until killed), one round per 100 ms.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct request {
  char method[8];
  char path[64];
  long size;
};

/* FNV-1a hash of a string: a leaf function with a loop. */
__attribute__((noinline)) unsigned long checksum(const char *text, size_t len) {
  unsigned long hash = 1469598103934665603UL;
  for (size_t i = 0; i < len; i++) {
    hash ^= (unsigned char)text[i];
    hash *= 1099511628211UL;
  }
  return hash;
}

/* Parses "METHOD PATH SIZE"; returns 0 on success, -1 on a malformed line. */
__attribute__((noinline)) int parse_request(const char *line, struct request *req) {
  memset(req, 0, sizeof *req);
  if (sscanf(line, "%7s %63s %ld", req->method, req->path, &req->size) != 3) return -1;
  return 0;
}

__attribute__((noinline)) char *handle_request(const struct request *req) {
  char *response = malloc((size_t)req->size + 64);
  if (response == NULL) return NULL;
  snprintf(response, (size_t)req->size + 64, "%s %s -> %016lx", req->method, req->path,
           checksum(req->path, strlen(req->path)));
  return response;
}

int main(int argc, char **argv) {
  static const char *lines[] = {"GET /index 42", "POST /upload 4096", "bogus", "GET /api/items 512"};
  long rounds = argc > 1 ? atol(argv[1]) : 5;
  unsigned handled = 0, rejected = 0;
  for (long round = 0; rounds == 0 || round < rounds; round++) {
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
      struct request req;
      if (parse_request(lines[i], &req) != 0) {
        rejected++;
        continue;
      }
      char *response = handle_request(&req);
      if (response != NULL) handled++;
      free(response);
    }
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  printf("handled %u requests, rejected %u\n", handled, rejected);
  return 0;
}
