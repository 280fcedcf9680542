/* netdrv.h: the part of the fake NCCL that loads a net plugin exactly as NCCL does
 * (dlopen RTLD_NOW|RTLD_LOCAL, then dlsym ncclNetPlugin_v12 .. _v8, newest first) and exposes
 * one version-neutral call surface, so each scenario runs unchanged against every version.
 * Shared by the test driver and the benchmark. */
#ifndef C4_NETDRV_H
#define C4_NETDRV_H

#include <stddef.h>
#include <stdint.h>

#include "nccl_abi.h"

typedef struct {
  int version;
  void *table;
  void *ctx; /* v11+: per-communicator context from init */
} net_t;

/* Load `path`; force = 0 probes v12..v8, else loads exactly that version. 0 on success. */
int net_load(const char *path, int force, net_t *n, void **dl);
const char *net_name(const net_t *n);
ncclResult_t net_init(net_t *n, uint64_t comm_id);
ncclResult_t net_devices(net_t *n, int *ndev);
/* Fills the common fields; checks version-specific ones itself and returns InternalError on
 * anything NCCL would not accept. */
ncclResult_t net_props(net_t *n, int dev, int *ptr_support, int *max_recvs, int *speed);
/* getProperties' pciPath (NULL when the device has none). */
const char *net_pci_path(net_t *n, int dev);
ncclResult_t net_listen(net_t *n, int dev, void *handle, void **lc);
ncclResult_t net_connect(net_t *n, int dev, void *handle, void **sc);
ncclResult_t net_accept(net_t *n, void *lc, void **rc);
ncclResult_t net_regmr(net_t *n, void *comm, void *data, size_t size, void **mh);
ncclResult_t net_deregmr(net_t *n, void *comm, void *mh);
ncclResult_t net_isend(net_t *n, void *sc, void *data, size_t size, int tag, void *mh, void **req);
ncclResult_t net_irecv(net_t *n, void *rc, void *data, size_t size, int tag, void *mh, void **req);
ncclResult_t net_iflush(net_t *n, void *rc, void *data, int size, void *mh, void **req);
ncclResult_t net_test(net_t *n, void *req, int *done, int *size);
ncclResult_t net_close_send(net_t *n, void *sc);
ncclResult_t net_close_recv(net_t *n, void *rc);
ncclResult_t net_close_listen(net_t *n, void *lc);
ncclResult_t net_finalize(net_t *n);

#endif
