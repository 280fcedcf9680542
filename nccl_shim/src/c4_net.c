/* c4_net.c: the exported ncclNetPlugin_v12 .. _v8 tables. Each is a thin adapter from one of
 * NCCL's calling conventions onto the single transport in c4_transport.c, so every version
 * behaves identically. Only these tables (and the profiler's) leave the library. */
#include <stdlib.h>
#include <string.h>

#include "c4_transport.h"

#define C4_EXPORT __attribute__((visibility("default")))
#define PLUGIN_NAME "C4-Socket"
#define MAX_COLL_BYTES (512ull << 20)

typedef struct { uint64_t comm_id; } net_ctx;

static ncclResult_t init_common(ncclDebugLogger_t log) {
  c4_set_logger(log); /* our messages then obey NCCL_DEBUG like NCCL's own */
  c4_rt_init();
  return ncclSuccess;
}

static ncclResult_t devices(int *ndev) {
  c4_rt_init();
  *ndev = c4t_devices();
  return ncclSuccess;
}

#define FILL_COMMON(p, dev)                                                                    \
  do {                                                                                         \
    c4t_props q;                                                                               \
    c4t_props_get(dev, &q);                                                                    \
    memset(p, 0, sizeof *p);                                                                   \
    (p)->name = (char *)q.name;                                                                \
    (p)->pciPath = (char *)q.pci_path;                                                         \
    (p)->guid = q.guid;                                                                        \
    (p)->ptrSupport = NCCL_PTR_HOST;                                                           \
    (p)->regIsGlobal = 0;                                                                      \
    (p)->speed = q.speed_mbps;                                                                 \
    (p)->port = 0;                                                                             \
    (p)->latency = 0;                                                                          \
    (p)->maxComms = 65536;                                                                     \
    (p)->maxRecvs = 1;                                                                         \
    (p)->netDeviceType = NCCL_NET_DEVICE_HOST;                                                 \
    (p)->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;                                   \
  } while (0)

#define CHECK_DEV(dev) if ((dev) < 0 || (dev) >= c4t_devices()) return ncclInvalidArgument

static ncclResult_t props_v8(int dev, ncclNetProperties_v8_t *p) {
  CHECK_DEV(dev);
  FILL_COMMON(p, dev);
  return ncclSuccess;
}

static ncclResult_t props_v9(int dev, ncclNetProperties_v9_t *p) {
  CHECK_DEV(dev);
  FILL_COMMON(p, dev);
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = dev;
  p->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
  p->maxCollBytes = MAX_COLL_BYTES;
  return ncclSuccess;
}

static ncclResult_t props_v11(int dev, ncclNetProperties_v11_t *p) {
  CHECK_DEV(dev);
  FILL_COMMON(p, dev);
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = dev;
  p->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
  p->maxCollBytes = MAX_COLL_BYTES;
  p->maxMultiRequestSize = 1;
  return ncclSuccess;
}

static ncclResult_t props_v12(int dev, ncclNetProperties_v12_t *p) {
  CHECK_DEV(dev);
  FILL_COMMON(p, dev);
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = dev;
  p->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
  p->maxCollBytes = MAX_COLL_BYTES;
  p->maxMultiRequestSize = 1;
  p->railId = NCCL_NET_ID_UNDEF;
  p->planeId = NCCL_NET_ID_UNDEF;
  return ncclSuccess;
}

static ncclResult_t listen_old(int dev, void *handle, void **lc) { return c4t_listen(0, dev, handle, lc); }
static ncclResult_t listen_new(void *ctx, int dev, void *handle, void **lc) {
  return c4t_listen(ctx ? ((net_ctx *)ctx)->comm_id : 0, dev, handle, lc);
}

static ncclResult_t connect_v8(int dev, void *handle, void **sc, ncclNetDeviceHandle_t **dc) {
  if (dc) *dc = NULL;
  return c4t_connect(0, dev, handle, sc);
}
static ncclResult_t connect_v10(int dev, ncclNetCommConfig_t *cfg, void *handle, void **sc,
                                ncclNetDeviceHandle_t **dc) {
  (void)cfg;
  if (dc) *dc = NULL;
  return c4t_connect(0, dev, handle, sc);
}
static ncclResult_t connect_v11(void *ctx, int dev, void *handle, void **sc,
                                ncclNetDeviceHandle_t **dc) {
  if (dc) *dc = NULL;
  return c4t_connect(ctx ? ((net_ctx *)ctx)->comm_id : 0, dev, handle, sc);
}

static ncclResult_t accept_any(void *lc, void **rc, ncclNetDeviceHandle_t **dc) {
  if (dc) *dc = NULL;
  return c4t_accept(lc, rc);
}

/* Host memory only: nothing to register, but NCCL wants a non-NULL handle. */
static ncclResult_t reg_mr(void *comm, void *data, size_t size, int type, void **mh) {
  (void)comm; (void)data; (void)size;
  if (type != NCCL_PTR_HOST) return ncclInternalError;
  *mh = (void *)(uintptr_t)1;
  return ncclSuccess;
}
static ncclResult_t dereg_mr(void *comm, void *mh) { (void)comm; (void)mh; return ncclSuccess; }

static ncclResult_t isend_v8(void *sc, void *data, int size, int tag, void *mh, void **req) {
  (void)mh;
  if (size < 0) return ncclInvalidArgument;
  return c4t_isend(sc, data, (size_t)size, tag, req);
}
static ncclResult_t isend_v9(void *sc, void *data, size_t size, int tag, void *mh, void **req) {
  (void)mh;
  return c4t_isend(sc, data, size, tag, req);
}
static ncclResult_t isend_v10(void *sc, void *data, size_t size, int tag, void *mh, void *ph,
                              void **req) {
  (void)mh; (void)ph;
  return c4t_isend(sc, data, size, tag, req);
}

static ncclResult_t irecv_v8(void *rc, int n, void **data, int *sizes, int *tags, void **mh,
                             void **req) {
  (void)mh;
  if (n != 1 || sizes[0] < 0) return ncclInternalError;
  size_t s = (size_t)sizes[0];
  return c4t_irecv(rc, n, data, &s, tags, req);
}
static ncclResult_t irecv_v9(void *rc, int n, void **data, size_t *sizes, int *tags, void **mh,
                             void **req) {
  (void)mh;
  return c4t_irecv(rc, n, data, sizes, tags, req);
}
static ncclResult_t irecv_v10(void *rc, int n, void **data, size_t *sizes, int *tags,
                              void **mh, void **ph, void **req) {
  (void)mh; (void)ph;
  return c4t_irecv(rc, n, data, sizes, tags, req);
}

/* Host memory is coherent once recv() returned: there is never anything to flush. */
static ncclResult_t iflush(void *rc, int n, void **data, int *sizes, void **mh, void **req) {
  (void)rc; (void)n; (void)data; (void)sizes; (void)mh;
  *req = NULL;
  return ncclSuccess;
}

static ncclResult_t test(void *req, int *done, int *sizes) {
  size_t s = 0;
  ncclResult_t r = c4t_test(req, done, &s);
  if (*done && sizes) sizes[0] = s > (size_t)INT32_MAX ? INT32_MAX : (int)s;
  return r;
}

static ncclResult_t init_v8(ncclDebugLogger_t log) { return init_common(log); }
static ncclResult_t init_v10(ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  (void)prof;
  return init_common(log);
}
static ncclResult_t init_v11(void **ctx, uint64_t comm_id, ncclNetCommConfig_t *cfg,
                             ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  (void)cfg; (void)prof;
  ncclResult_t r = init_common(log);
  net_ctx *c = calloc(1, sizeof *c);
  if (!c) return ncclSystemError;
  c->comm_id = comm_id;
  *ctx = c;
  return r;
}
static ncclResult_t finalize(void *ctx) {
  c4_rt_flush(); /* final connection records reach the agent before NCCL may unload us */
  free(ctx);
  return ncclSuccess;
}
static ncclResult_t set_net_attr(void *ctx, ncclNetAttr_t *attr) {
  (void)ctx; (void)attr; /* hints only; our flow count comes from the controller */
  return ncclSuccess;
}

C4_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = PLUGIN_NAME, .init = init_v8, .devices = devices, .getProperties = props_v8,
    .listen = listen_old, .connect = connect_v8, .accept = accept_any, .regMr = reg_mr,
    .regMrDmaBuf = NULL, .deregMr = dereg_mr, .isend = isend_v8, .irecv = irecv_v8,
    .iflush = iflush, .test = test, .closeSend = c4t_close_send, .closeRecv = c4t_close_recv,
    .closeListen = c4t_close_listen, .getDeviceMr = NULL, .irecvConsumed = NULL};

C4_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = PLUGIN_NAME, .init = init_v8, .devices = devices, .getProperties = props_v9,
    .listen = listen_old, .connect = connect_v8, .accept = accept_any, .regMr = reg_mr,
    .regMrDmaBuf = NULL, .deregMr = dereg_mr, .isend = isend_v9, .irecv = irecv_v9,
    .iflush = iflush, .test = test, .closeSend = c4t_close_send, .closeRecv = c4t_close_recv,
    .closeListen = c4t_close_listen, .getDeviceMr = NULL, .irecvConsumed = NULL,
    .makeVDevice = NULL};

C4_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = PLUGIN_NAME, .init = init_v10, .devices = devices, .getProperties = props_v9,
    .listen = listen_old, .connect = connect_v10, .accept = accept_any, .regMr = reg_mr,
    .regMrDmaBuf = NULL, .deregMr = dereg_mr, .isend = isend_v10, .irecv = irecv_v10,
    .iflush = iflush, .test = test, .closeSend = c4t_close_send, .closeRecv = c4t_close_recv,
    .closeListen = c4t_close_listen, .getDeviceMr = NULL, .irecvConsumed = NULL,
    .makeVDevice = NULL};

C4_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = PLUGIN_NAME, .init = init_v11, .devices = devices, .getProperties = props_v11,
    .listen = listen_new, .connect = connect_v11, .accept = accept_any, .regMr = reg_mr,
    .regMrDmaBuf = NULL, .deregMr = dereg_mr, .isend = isend_v10, .irecv = irecv_v10,
    .iflush = iflush, .test = test, .closeSend = c4t_close_send, .closeRecv = c4t_close_recv,
    .closeListen = c4t_close_listen, .getDeviceMr = NULL, .irecvConsumed = NULL,
    .makeVDevice = NULL, .finalize = finalize, .setNetAttr = set_net_attr};

/* v12: NCCL uses this struct in place (no copy), so it must be static storage: it is. */
C4_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = PLUGIN_NAME, .init = init_v11, .devices = devices, .getProperties = props_v12,
    .listen = listen_new, .connect = connect_v11, .accept = accept_any, .regMr = reg_mr,
    .regMrDmaBuf = NULL, .deregMr = dereg_mr, .isend = isend_v10, .irecv = irecv_v10,
    .iflush = iflush, .test = test, .closeSend = c4t_close_send, .closeRecv = c4t_close_recv,
    .closeListen = c4t_close_listen, .getDeviceMr = NULL, .irecvConsumed = NULL,
    .makeVDevice = NULL, .finalize = finalize, .setNetAttr = set_net_attr};
