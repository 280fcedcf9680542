/* echo_agent.c: the floor under the LOOKUP figure. A minimal responder in C on the same kind of
 * socket: it answers every LOOKUP at once with a fixed two-flow ASSIGN, nothing else. The
 * lookup client's round trips against it are what this machine gives right now (scheduling,
 * socket wake-ups), so the agent's own share is the difference.
 * Usage: echo_agent <socket path>   (runs until killed) */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "c4_proto.h"

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: echo_agent <socket>\n"); return 2; }
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", argv[1]);
  unlink(argv[1]);
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa)) { perror("bind"); return 1; }
  printf("ready\n");
  fflush(stdout);
  for (;;) {
    uint8_t in[C4P_MAX_DGRAM], out[C4P_MAX_DGRAM];
    struct sockaddr_un from;
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(fd, in, sizeof in, 0, (struct sockaddr *)&from, &fl);
    c4p_lookup l;
    if (n <= 0 || c4p_decode_lookup(in, (size_t)n, &l) != 0) continue;
    c4p_assign a = {.req_id = l.req_id, .version = 1, .comm_id = l.comm_id, .local = l.local,
                    .remote = l.remote, .conn_index = l.conn_index, .status = C4P_OK,
                    .nflows = 2, .src_rank = l.src_rank, .dst_rank = l.dst_rank,
                    .flows = {{49152, 500000, l.local, l.remote}, {49153, 500000, l.local, l.remote}}};
    size_t m = c4p_encode_assign(&a, out, sizeof out);
    sendto(fd, out, m, 0, (struct sockaddr *)&from, fl);
  }
}
