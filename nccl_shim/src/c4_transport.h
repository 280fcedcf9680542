/* c4_transport.h: the one internal TCP transport ("C4-Socket") behind every exported net
 * version. Version adapters (c4_net.c) translate NCCL's calling conventions to these calls;
 * sizes are size_t here and narrowed only at the v8 boundary. */
#ifndef C4_TRANSPORT_H
#define C4_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "c4_rt.h"
#include "nccl_abi.h"

typedef struct {
  const char *name;
  const char *pci_path; /* NULL when the device has no PCI function (veth, loopback) */
  int speed_mbps;
  uint64_t guid;
} c4t_props;

C4_HIDDEN int c4t_devices(void);
C4_HIDDEN void c4t_props_get(int dev, c4t_props *p);
C4_HIDDEN ncclResult_t c4t_listen(uint64_t comm_id, int dev, void *handle, void **listen_comm);
C4_HIDDEN ncclResult_t c4t_connect(uint64_t comm_id, int dev, void *handle, void **send_comm);
C4_HIDDEN ncclResult_t c4t_accept(void *listen_comm, void **recv_comm);
C4_HIDDEN ncclResult_t c4t_isend(void *send_comm, void *data, size_t size, int tag,
                                 void **request);
C4_HIDDEN ncclResult_t c4t_irecv(void *recv_comm, int n, void **data, const size_t *sizes,
                                 const int *tags, void **request);
C4_HIDDEN ncclResult_t c4t_test(void *request, int *done, size_t *size);
C4_HIDDEN ncclResult_t c4t_close_send(void *send_comm);
C4_HIDDEN ncclResult_t c4t_close_recv(void *recv_comm);
C4_HIDDEN ncclResult_t c4t_close_listen(void *listen_comm);

#endif
