/*
 * A forking TCP server on 127.0.0.1, for tests of the processes a run covers:
 *   fork-server PORT LOG
 * accepts connections and forks a child per connection, which reads one line, calls
 * handle_request() once with the request's number (the parent's count of connections), writes
 * `ok N\n` and exits. The parent reaps its children as they end. On SIGTERM it stops
 * accepting, waits for every child, appends `SIGTERM handled: served N` to LOG and exits 0.
 * At the start it appends `listening pid=P` to LOG.
 */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static volatile long handled_sink;

static void on_term(int signal) {
  (void)signal;
  stop = 1;
}

__attribute__((noinline)) long handle_request(long number) {
  handled_sink += number;
  return number;
}

static void append(const char *log, const char *text) {
  FILE *f = fopen(log, "a");
  if (f == NULL) return;
  fputs(text, f);
  fclose(f);
}

static void serve(int client, long number) {
  char line[256];
  ssize_t got = read(client, line, sizeof line - 1);
  if (got < 0) got = 0;
  handle_request(number);
  char reply[64];
  int n = snprintf(reply, sizeof reply, "ok %ld\n", number);
  (void)!write(client, reply, (size_t)n);
  close(client);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: fork-server PORT LOG\n");
    return 2;
  }
  const char *log = argv[2];
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = on_term;
  // No SA_RESTART: accept() returns EINTR when SIGTERM comes.
  sigaction(SIGTERM, &action, NULL);
  int server = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in address;
  memset(&address, 0, sizeof address);
  address.sin_family = AF_INET;
  address.sin_port = htons((unsigned short)atoi(argv[1]));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(server, (struct sockaddr *)&address, sizeof address) != 0 || listen(server, 64) != 0) {
    perror("fork-server: bind/listen");
    return 1;
  }
  char text[128];
  snprintf(text, sizeof text, "listening pid=%d\n", (int)getpid());
  append(log, text);
  long served = 0;
  while (!stop) {
    int client = accept(server, NULL, NULL);
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    if (client < 0) continue;
    served++;
    pid_t child = fork();
    if (child == 0) {
      close(server);
      serve(client, served);
      _exit(0);
    }
    close(client);
  }
  close(server);
  while (wait(NULL) > 0 || errno == EINTR) {
  }
  snprintf(text, sizeof text, "SIGTERM handled: served %ld\n", served);
  append(log, text);
  return 0;
}
