/* fake_agent.h: a scriptable stand-in for the node agent, run as a thread inside the test
 * drivers. It answers lookups (well, slowly, with garbage, or not at all, or dies), pushes
 * weight updates, keeps every telemetry datagram it receives so tests can assert on them, and
 * can own the host's fixed data port like the real agent: read each socket's hello and hand
 * the socket to the process the hello names (SCM_RIGHTS), or refuse it ("C4NO"). */
#ifndef C4_FAKE_AGENT_H
#define C4_FAKE_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "c4_proto.h"

enum agent_mode { AGENT_OK, AGENT_SLOW, AGENT_GARBAGE, AGENT_SILENT, AGENT_DIE_AFTER };

typedef struct {
  enum agent_mode mode;
  int slow_ms;       /* AGENT_SLOW: delay before each reply */
  int die_after;     /* AGENT_DIE_AFTER: lookups answered before the agent goes away */
  int nflows;        /* flows per connection in replies (0 = answer "unknown") */
  uint16_t base_port; /* flow i of connection c gets base_port + 16*c + i ... */
  uint16_t ports[C4P_MAX_FLOWS]; /* ... unless ports[0] is set: then these, for every connection */
  uint32_t weight_ppm[C4P_MAX_FLOWS];
  uint16_t handoff_port; /* != 0: listen on 127.0.0.1:handoff_port and hand sockets over */
  int handoff_refuse;    /* answer every hello with "C4NO" instead */
} agent_cfg;

int agent_start(const char *path, const agent_cfg *cfg);
void agent_stop(void);
/* Push an unsolicited assignment (req_id 0) to the last shim that asked. */
int agent_push(const c4p_assign *a);

/* Received telemetry, copied out under the agent's lock. */
int agent_colls(c4p_coll *out, int cap);
int agent_conns(c4p_conn *out, int cap);
int agent_last_stats(c4p_stats *out); /* 1 if any stats datagram arrived */
int agent_lookups(c4p_lookup *out, int cap);
int agent_bad_datagrams(void);
int agent_handoffs(void); /* sockets handed over (or refused, with handoff_refuse) */

#endif
