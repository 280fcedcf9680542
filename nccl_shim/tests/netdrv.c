/* netdrv.c: see netdrv.h. Each call dispatches on the loaded version and uses that version's
 * exact argument types (int sizes in v8, phandles from v10, ctx from v11). */
#include "netdrv.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define V8 ((ncclNet_v8_t *)n->table)
#define V9 ((ncclNet_v9_t *)n->table)
#define V10 ((ncclNet_v10_t *)n->table)
#define V11 ((ncclNet_v11_t *)n->table)
#define V12 ((ncclNet_v12_t *)n->table)

/* NCCL's logger; FAKE_NCCL_LOG=1 prints what the plugin logs (NCCL_DEBUG=INFO's stand-in). */
static void logger(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  (void)flags; (void)file; (void)line;
  const char *on = getenv("FAKE_NCCL_LOG");
  if (!on || !*on || *on == '0') return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[nccl log %d] ", level);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

int net_load(const char *path, int force, net_t *n, void **dl) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "dlopen %s: %s\n", path, dlerror()); return -1; }
  *dl = h;
  memset(n, 0, sizeof *n);
  for (int v = 12; v >= 8; v--) {
    if (force && v != force) continue;
    char sym[32];
    snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", v);
    void *t = dlsym(h, sym);
    if (t) { n->version = v; n->table = t; return 0; }
  }
  return -1;
}

const char *net_name(const net_t *n) { return ((ncclNet_v8_t *)n->table)->name; }

ncclResult_t net_init(net_t *n, uint64_t comm_id) {
  ncclNetCommConfig_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
  switch (n->version) {
    case 8: return V8->init(logger);
    case 9: return V9->init(logger);
    case 10: return V10->init(logger, NULL);
    case 11: return V11->init(&n->ctx, comm_id, &cfg, logger, NULL);
    default: return V12->init(&n->ctx, comm_id, &cfg, logger, NULL);
  }
}

ncclResult_t net_devices(net_t *n, int *ndev) { return V8->devices(ndev); /* same slot */ }

ncclResult_t net_props(net_t *n, int dev, int *ptr, int *maxr, int *speed) {
  ncclResult_t r;
  if (n->version == 8) {
    ncclNetProperties_v8_t p;
    if ((r = V8->getProperties(dev, &p))) return r;
    *ptr = p.ptrSupport; *maxr = p.maxRecvs; *speed = p.speed;
    return p.name && p.maxComms > 0 ? ncclSuccess : ncclInternalError;
  }
  if (n->version <= 10) {
    ncclNetProperties_v9_t p;
    if ((r = V9->getProperties(dev, &p))) return r;
    *ptr = p.ptrSupport; *maxr = p.maxRecvs; *speed = p.speed;
    return p.name && p.vProps.ndevs == 1 && p.vProps.devs[0] == dev && p.maxP2pBytes > 0 &&
                   p.maxCollBytes > 0 ? ncclSuccess : ncclInternalError;
  }
  if (n->version == 11) {
    ncclNetProperties_v11_t p;
    if ((r = V11->getProperties(dev, &p))) return r;
    *ptr = p.ptrSupport; *maxr = p.maxRecvs; *speed = p.speed;
    return p.name && p.vProps.ndevs == 1 && p.maxMultiRequestSize >= 1 ? ncclSuccess
                                                                       : ncclInternalError;
  }
  ncclNetProperties_v12_t p;
  if ((r = V12->getProperties(dev, &p))) return r;
  *ptr = p.ptrSupport; *maxr = p.maxRecvs; *speed = p.speed;
  return p.name && p.vProps.ndevs == 1 && p.railId == NCCL_NET_ID_UNDEF &&
                 p.planeId == NCCL_NET_ID_UNDEF && p.maxP2pBytes == NCCL_MAX_NET_SIZE_BYTES
             ? ncclSuccess : ncclInternalError;
}

const char *net_pci_path(net_t *n, int dev) {
  if (n->version == 8) { ncclNetProperties_v8_t p; return V8->getProperties(dev, &p) ? NULL : p.pciPath; }
  if (n->version <= 10) { ncclNetProperties_v9_t p; return V9->getProperties(dev, &p) ? NULL : p.pciPath; }
  if (n->version == 11) { ncclNetProperties_v11_t p; return V11->getProperties(dev, &p) ? NULL : p.pciPath; }
  ncclNetProperties_v12_t p;
  return V12->getProperties(dev, &p) ? NULL : p.pciPath;
}

ncclResult_t net_listen(net_t *n, int dev, void *handle, void **lc) {
  if (n->version >= 11) return V11->listen(n->ctx, dev, handle, lc);
  return V8->listen(dev, handle, lc);
}

ncclResult_t net_connect(net_t *n, int dev, void *handle, void **sc) {
  ncclNetDeviceHandle_t *dc = NULL;
  ncclNetCommConfig_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
  if (n->version >= 11) return V11->connect(n->ctx, dev, handle, sc, &dc);
  if (n->version == 10) return V10->connect(dev, &cfg, handle, sc, &dc);
  return V8->connect(dev, handle, sc, &dc);
}

ncclResult_t net_accept(net_t *n, void *lc, void **rc) {
  ncclNetDeviceHandle_t *dc = NULL;
  return V8->accept(lc, rc, &dc);
}

ncclResult_t net_regmr(net_t *n, void *comm, void *data, size_t size, void **mh) {
  return V8->regMr(comm, data, size, NCCL_PTR_HOST, mh);
}
ncclResult_t net_deregmr(net_t *n, void *comm, void *mh) { return V8->deregMr(comm, mh); }

ncclResult_t net_isend(net_t *n, void *sc, void *data, size_t size, int tag, void *mh, void **req) {
  if (n->version == 8) return V8->isend(sc, data, (int)size, tag, mh, req);
  if (n->version == 9) return V9->isend(sc, data, size, tag, mh, req);
  return V10->isend(sc, data, size, tag, mh, NULL, req);
}

ncclResult_t net_irecv(net_t *n, void *rc, void *data, size_t size, int tag, void *mh, void **req) {
  void *d[1] = {data}, *m[1] = {mh}, *ph[1] = {NULL};
  int tags[1] = {tag};
  /* NCCL may pre-set the request to "optional completion" for LL/LL128. */
  *req = (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION;
  if (n->version == 8) {
    int s[1] = {(int)size};
    return V8->irecv(rc, 1, d, s, tags, m, req);
  }
  size_t s[1] = {size};
  if (n->version == 9) return V9->irecv(rc, 1, d, s, tags, m, req);
  return V10->irecv(rc, 1, d, s, tags, m, ph, req);
}

ncclResult_t net_iflush(net_t *n, void *rc, void *data, int size, void *mh, void **req) {
  void *d[1] = {data}, *m[1] = {mh};
  int s[1] = {size};
  return V8->iflush(rc, 1, d, s, m, req);
}

ncclResult_t net_test(net_t *n, void *req, int *done, int *size) { return V8->test(req, done, size); }
ncclResult_t net_close_send(net_t *n, void *sc) { return V8->closeSend(sc); }
ncclResult_t net_close_recv(net_t *n, void *rc) { return V8->closeRecv(rc); }
ncclResult_t net_close_listen(net_t *n, void *lc) { return V8->closeListen(lc); }

ncclResult_t net_finalize(net_t *n) {
  if (n->version >= 11) return V11->finalize(n->ctx);
  return ncclSuccess;
}
