/* nccl_abi.h: our own declarations of the NCCL net (v8..v12) and profiler (v4, v5, v6) plugin
 * ABIs.
 *
 * Written from the layout facts in docs/research/nccl-shim.md §1.2 and §6.5 (member order,
 * types, sizes, constant values as of NCCL 2.30.7 src/include/plugin/net/net_v8.h..net_v12.h
 * and profiler/profiler_v4.h, profiler_v5.h), and for profiler v6 from the member list of
 * src/include/plugin/profiler/profiler_v6.h, identical in the tags v2.29.2-1 .. v2.30.7-1 (see
 * nccl_shim/README.md "Profiler versions" for why v7 is not declared). No NCCL text is copied;
 * names are ours where
 * NCCL's are not part of the binary interface. Every size and offset that matters to NCCL is
 * pinned with static_assert below, so a wrong edit fails the build instead of a job.
 * Shared by the plugin and by the fake-NCCL test driver (which plays NCCL's side). */
#ifndef C4_NCCL_ABI_H
#define C4_NCCL_ABI_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

enum { NCCL_LOG_NONE = 0, NCCL_LOG_VERSION = 1, NCCL_LOG_WARN = 2, NCCL_LOG_INFO = 3,
       NCCL_LOG_ABORT = 4, NCCL_LOG_TRACE = 5 };
enum { NCCL_SUBSYS_INIT = 0x1, NCCL_SUBSYS_NET = 0x10, NCCL_SUBSYS_ENV = 0x80,
       NCCL_SUBSYS_PROFILE = 0x4000 };

typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char *file, int line,
                                  const char *fmt, ...);
typedef ncclResult_t (*ncclProfilerCallback_t)(void **eHandle, int type, void *pHandle,
                                               int64_t pluginId, void *extData);

#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_NET_MAX_REQUESTS 32
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
#define NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)
#define NCCL_NET_ID_UNDEF (-1)
#define NCCL_MAX_NET_SIZE_BYTES (1ULL << 40)
#define NCCL_NET_DEVICE_HOST 0
#define NCCL_NET_DEVICE_INVALID_VERSION 0

typedef struct {
  int type;
  int version;
  void *handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_t;

typedef struct { int trafficClass; } ncclNetCommConfig_t;

typedef struct {
  int32_t maxConcurrentPeers, minConcurrentPeers, maxFlowsPerPeer, minFlowsPerPeer;
} ncclNetAttrSide_t;
typedef struct {
  ncclNetAttrSide_t send, recv;
  uint32_t op, algo, proto;
} ncclNetAttr_t;

/* ---- properties ---- */
typedef struct {
  char *name; char *pciPath; uint64_t guid;
  int ptrSupport, regIsGlobal, speed, port; float latency;
  int maxComms, maxRecvs, netDeviceType, netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct { int ndevs; int devs[4]; } ncclNetVDeviceProps_v9_t;
typedef struct { int ndevs; int devs[8]; } ncclNetVDeviceProps_v12_t;

typedef struct {
  char *name; char *pciPath; uint64_t guid;
  int ptrSupport, regIsGlobal, forceFlush, speed, port; float latency;
  int maxComms, maxRecvs, netDeviceType, netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes, maxCollBytes;
} ncclNetProperties_v9_t; /* v10 is identical */

typedef struct {
  char *name; char *pciPath; uint64_t guid;
  int ptrSupport, regIsGlobal, forceFlush, speed, port; float latency;
  int maxComms, maxRecvs, netDeviceType, netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes, maxCollBytes;
  int maxMultiRequestSize;
} ncclNetProperties_v11_t;

typedef struct {
  char *name; char *pciPath; uint64_t guid;
  int ptrSupport, regIsGlobal, forceFlush, speed, port; float latency;
  int maxComms, maxRecvs, netDeviceType, netDeviceVersion;
  ncclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes, maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId, planeId;
} ncclNetProperties_v12_t;

/* ---- net function tables ---- */
typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t log);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, void *handle, void **sendComm, ncclNetDeviceHandle_t **dc);
  ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_t **dc);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle,
                        void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags,
                        void **mhandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
} ncclNet_v8_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t log);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, void *handle, void **sendComm, ncclNetDeviceHandle_t **dc);
  ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_t **dc);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                        void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v9_t *props);
} ncclNet_v9_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t log, ncclProfilerCallback_t prof);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_t *config, void *handle, void **sendComm,
                          ncclNetDeviceHandle_t **dc);
  ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_t **dc);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                        void *phandle, void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **phandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v9_t *props);
} ncclNet_v10_t;

/* v11 and v12 have the same members; only the property/vdevice structs differ. */
#define C4_NET_V11_MEMBERS(PROPS, VPROPS)                                                      \
  const char *name;                                                                            \
  ncclResult_t (*init)(void **ctx, uint64_t commId, ncclNetCommConfig_t *config,               \
                       ncclDebugLogger_t log, ncclProfilerCallback_t prof);                    \
  ncclResult_t (*devices)(int *ndev);                                                          \
  ncclResult_t (*getProperties)(int dev, PROPS *props);                                        \
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);                 \
  ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,                   \
                          ncclNetDeviceHandle_t **dc);                                         \
  ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_t **dc);       \
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);        \
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,  \
                              int fd, void **mhandle);                                         \
  ncclResult_t (*deregMr)(void *comm, void *mhandle);                                          \
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,       \
                        void *phandle, void **request);                                        \
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,          \
                        void **mhandles, void **phandles, void **request);                     \
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,      \
                         void **request);                                                      \
  ncclResult_t (*test)(void *request, int *done, int *sizes);                                  \
  ncclResult_t (*closeSend)(void *sendComm);                                                   \
  ncclResult_t (*closeRecv)(void *recvComm);                                                   \
  ncclResult_t (*closeListen)(void *listenComm);                                               \
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr);                         \
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);                         \
  ncclResult_t (*makeVDevice)(int *d, VPROPS *props);                                          \
  ncclResult_t (*finalize)(void *ctx);                                                         \
  ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_t *attr);

typedef struct { C4_NET_V11_MEMBERS(ncclNetProperties_v11_t, ncclNetVDeviceProps_v9_t) } ncclNet_v11_t;
typedef struct { C4_NET_V11_MEMBERS(ncclNetProperties_v12_t, ncclNetVDeviceProps_v12_t) } ncclNet_v12_t;

/* ---- profiler ---- */
enum {
  ncclProfileGroup = 1 << 0, ncclProfileColl = 1 << 1, ncclProfileP2p = 1 << 2,
  ncclProfileProxyOp = 1 << 3, ncclProfileProxyStep = 1 << 4, ncclProfileProxyCtrl = 1 << 5,
  ncclProfileKernelCh = 1 << 6, ncclProfileNetPlugin = 1 << 7,
  /* v6: copy-engine collectives (intra-node only) */
  ncclProfileCeColl = 1 << 12, ncclProfileCeSync = 1 << 13, ncclProfileCeBatch = 1 << 14,
};

/* State values NCCL passes to recordEventState (shared numbering across v4/v5). */
enum {
  ncclProfilerProxyStepSendGPUWait = 8, ncclProfilerProxyStepSendWait = 9,
  ncclProfilerProxyStepRecvWait = 10, ncclProfilerProxyStepRecvFlushWait = 11,
  ncclProfilerProxyStepRecvGPUWait = 12, ncclProfilerProxyStepSendPeerWait_v4 = 20,
  ncclProfilerNetPluginUpdate = 21, ncclProfilerKernelChStop = 22,
};

typedef union {
  struct { size_t transSize; } proxyStep;
  struct { int appendedProxyOps; } proxyCtrl;
  struct { void *data; } netPlugin;
  struct { uint64_t pTimer; } kernelCh;
} ncclProfilerEventStateArgs_t; /* same 8-byte union in v4 and v5 */

/* The union body is common to v4 and v5 up to coll.proto; v5 adds coll.parentGroup and API
 * events we do not use (they only grow the union, pinned by the size asserts). */
#define C4_PROF_UNION_V4                                                                       \
  struct {                                                                                     \
    uint64_t seqNumber; const char *func; const void *sendBuff; void *recvBuff;                \
    size_t count; int root; const char *datatype; uint8_t nChannels; uint8_t nWarps;           \
    const char *algo; const char *proto;                                                       \
  } coll;                                                                                      \
  struct {                                                                                     \
    const char *func; void *buff; const char *datatype; size_t count; int peer;                \
    uint8_t nChannels;                                                                         \
  } p2p;                                                                                       \
  struct { pid_t pid; uint8_t channelId; int peer; int nSteps; int chunkSize; int isSend; }    \
      proxyOp;                                                                                 \
  struct { int step; } proxyStep;                                                              \
  struct { uint8_t channelId; uint64_t pTimer; } kernelCh;                                     \
  struct { int64_t id; void *data; } netPlugin;

typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union { C4_PROF_UNION_V4 };
} ncclProfilerEventDescr_v4_t;

typedef struct {
  uint64_t type;
  void *parentObj;
  int rank;
  union {
    C4_PROF_UNION_V4
    struct {
      uint64_t seqNumber; const char *func; const void *sendBuff; void *recvBuff;
      size_t count; int root; const char *datatype; uint8_t nChannels; uint8_t nWarps;
      const char *algo; const char *proto; void *parentGroup;
    } coll5;
  };
} ncclProfilerEventDescr_v5_t;

/* v6 (NCCL 2.29, 2.30): v5's union plus the copy-engine descriptors, which grow no member we
 * read and leave the size at 112 bytes. */
typedef struct {
  uint64_t type;
  void *parentObj;
  int rank;
  union {
    C4_PROF_UNION_V4
    struct {
      uint64_t seqNumber; const char *func; const void *sendBuff; void *recvBuff;
      size_t count; int root; const char *datatype; uint8_t nChannels; uint8_t nWarps;
      const char *algo; const char *proto; void *parentGroup;
    } coll5;
    struct {
      uint64_t seqNumber; const char *func; const void *sendBuff; void *recvBuff;
      size_t count; int root; const char *datatype; const char *syncStrategy;
      bool intraBatchSync; uint32_t batchSize; uint32_t numBatches; uint32_t ceSeqNum;
      void *stream;
    } ceColl;
    struct { bool isComplete; int nRanks; } ceCollSync;
    struct { int numOps; size_t totalBytes; bool useIntraSync; } ceCollBatch;
  };
} ncclProfilerEventDescr_v6_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, int *eActivationMask, const char *commName,
                       uint64_t commHash, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t log);
  ncclResult_t (*startEvent)(void *ctx, void **eHandle, ncclProfilerEventDescr_v4_t *d);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, int state, ncclProfilerEventStateArgs_t *a);
  ncclResult_t (*finalize)(void *ctx);
} ncclProfiler_v4_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, int *eActivationMask,
                       const char *commName, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t log);
  ncclResult_t (*startEvent)(void *ctx, void **eHandle, ncclProfilerEventDescr_v5_t *d);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, int state, ncclProfilerEventStateArgs_t *a);
  ncclResult_t (*finalize)(void *ctx);
} ncclProfiler_v5_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, int *eActivationMask,
                       const char *commName, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t log);
  ncclResult_t (*startEvent)(void *ctx, void **eHandle, ncclProfilerEventDescr_v6_t *d);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, int state, ncclProfilerEventStateArgs_t *a);
  ncclResult_t (*finalize)(void *ctx);
} ncclProfiler_v6_t;

/* ---- pinned layout (x86-64 LP64), research §6.5 ---- */
#if defined(__x86_64__) || defined(__aarch64__)
static_assert(sizeof(ncclNetDeviceHandle_t) == 32, "device handle");
static_assert(sizeof(ncclNetCommConfig_t) == 4, "comm config");
static_assert(sizeof(ncclNetAttr_t) == 44, "net attr");
static_assert(sizeof(ncclNetProperties_v8_t) == 64, "props v8");
static_assert(offsetof(ncclNetProperties_v8_t, guid) == 16, "v8 guid");
static_assert(offsetof(ncclNetProperties_v8_t, ptrSupport) == 24, "v8 ptrSupport");
static_assert(offsetof(ncclNetProperties_v8_t, speed) == 32, "v8 speed");
static_assert(offsetof(ncclNetProperties_v8_t, latency) == 40, "v8 latency");
static_assert(offsetof(ncclNetProperties_v8_t, maxComms) == 44, "v8 maxComms");
static_assert(offsetof(ncclNetProperties_v8_t, maxRecvs) == 48, "v8 maxRecvs");
static_assert(offsetof(ncclNetProperties_v8_t, netDeviceVersion) == 56, "v8 devver");
static_assert(sizeof(ncclNetProperties_v9_t) == 104, "props v9/v10");
static_assert(offsetof(ncclNetProperties_v9_t, forceFlush) == 32, "v9 forceFlush");
static_assert(offsetof(ncclNetProperties_v9_t, speed) == 36, "v9 speed");
static_assert(offsetof(ncclNetProperties_v9_t, netDeviceVersion) == 60, "v9 devver");
static_assert(offsetof(ncclNetProperties_v9_t, vProps) == 64, "v9 vProps");
static_assert(offsetof(ncclNetProperties_v9_t, maxP2pBytes) == 88, "v9 maxP2p");
static_assert(offsetof(ncclNetProperties_v9_t, maxCollBytes) == 96, "v9 maxColl");
static_assert(sizeof(ncclNetProperties_v11_t) == 112, "props v11");
static_assert(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize) == 104, "v11 mmrs");
static_assert(sizeof(ncclNetProperties_v12_t) == 128, "props v12");
static_assert(offsetof(ncclNetProperties_v12_t, vProps) == 64, "v12 vProps");
static_assert(offsetof(ncclNetProperties_v12_t, maxP2pBytes) == 104, "v12 maxP2p");
static_assert(offsetof(ncclNetProperties_v12_t, maxCollBytes) == 112, "v12 maxColl");
static_assert(offsetof(ncclNetProperties_v12_t, maxMultiRequestSize) == 120, "v12 mmrs");
static_assert(offsetof(ncclNetProperties_v12_t, railId) == 124, "v12 railId");
static_assert(offsetof(ncclNetProperties_v12_t, planeId) == 126, "v12 planeId");
static_assert(sizeof(ncclNet_v8_t) == 152, "net v8");
static_assert(offsetof(ncclNet_v8_t, isend) == 80, "v8 isend");
static_assert(offsetof(ncclNet_v8_t, irecv) == 88, "v8 irecv");
static_assert(offsetof(ncclNet_v8_t, test) == 104, "v8 test");
static_assert(offsetof(ncclNet_v8_t, closeListen) == 128, "v8 closeListen");
static_assert(offsetof(ncclNet_v8_t, irecvConsumed) == 144, "v8 irecvConsumed");
static_assert(sizeof(ncclNet_v9_t) == 160, "net v9");
static_assert(offsetof(ncclNet_v9_t, makeVDevice) == 152, "v9 makeVDevice");
static_assert(sizeof(ncclNet_v10_t) == 160, "net v10");
static_assert(sizeof(ncclNet_v11_t) == 176, "net v11");
static_assert(offsetof(ncclNet_v11_t, finalize) == 160, "v11 finalize");
static_assert(offsetof(ncclNet_v11_t, setNetAttr) == 168, "v11 setNetAttr");
static_assert(sizeof(ncclNet_v12_t) == 176, "net v12");
static_assert(offsetof(ncclNet_v12_t, test) == 104, "v12 test");
static_assert(sizeof(ncclProfiler_v5_t) == 48, "profiler v5");
static_assert(sizeof(ncclProfiler_v4_t) == 48, "profiler v4");
static_assert(sizeof(ncclProfilerEventStateArgs_t) == 8, "state args");
static_assert(sizeof(ncclProfilerEventDescr_v5_t) == 112, "descr v5");
static_assert(sizeof(ncclProfilerEventDescr_v4_t) == 104, "descr v4");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, parentObj) == 8, "v5 parentObj");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, rank) == 16, "v5 rank");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.seqNumber) == 24, "v5 seq");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.func) == 32, "v5 func");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.count) == 56, "v5 count");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.root) == 64, "v5 root");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.datatype) == 72, "v5 datatype");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.nChannels) == 80, "v5 nChannels");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.nWarps) == 81, "v5 nWarps");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.algo) == 88, "v5 algo");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.proto) == 96, "v5 proto");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll5.parentGroup) == 104, "v5 pgroup");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, proxyOp.pid) == 24, "v5 pid");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, proxyOp.channelId) == 28, "v5 chan");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, proxyOp.peer) == 32, "v5 peer");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, proxyOp.nSteps) == 36, "v5 nSteps");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, proxyOp.chunkSize) == 40, "v5 chunk");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, proxyOp.isSend) == 44, "v5 isSend");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, kernelCh.pTimer) == 32, "v5 pTimer");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, netPlugin.id) == 24, "v5 np id");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, netPlugin.data) == 32, "v5 np data");
static_assert(sizeof(ncclProfiler_v6_t) == 48, "profiler v6");
static_assert(sizeof(ncclProfilerEventDescr_v6_t) == 112, "descr v6");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, rank) == 16, "v6 rank");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, coll.seqNumber) == 24, "v6 seq");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, coll.func) == 32, "v6 func");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, coll.count) == 56, "v6 count");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, coll.datatype) == 72, "v6 datatype");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, coll.nChannels) == 80, "v6 nChannels");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, coll5.parentGroup) == 104, "v6 pgroup");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, proxyOp.pid) == 24, "v6 pid");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, proxyOp.peer) == 32, "v6 peer");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, proxyOp.nSteps) == 36, "v6 nSteps");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, proxyOp.chunkSize) == 40, "v6 chunk");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, proxyOp.isSend) == 44, "v6 isSend");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, kernelCh.pTimer) == 32, "v6 pTimer");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, netPlugin.data) == 32, "v6 np data");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, ceColl.syncStrategy) == 80, "v6 ce sync");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, ceColl.ceSeqNum) == 100, "v6 ce seq");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, ceColl.stream) == 104, "v6 ce stream");
static_assert(offsetof(ncclProfilerEventDescr_v6_t, ceCollBatch.totalBytes) == 32, "v6 batch");
static_assert(offsetof(ncclProfilerEventDescr_v4_t, coll.proto) == 96, "v4 proto");
static_assert(offsetof(ncclProfilerEventDescr_v4_t, proxyOp.isSend) == 44, "v4 isSend");
#endif

#endif
