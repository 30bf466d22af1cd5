/* A stand-in for libcuda that the runtime's host path can run on without a GPU
 * (tests/launch_host_path.rs). It answers the driver calls the runtime makes as an H100-like
 * device would, does no GPU work, and counts every call, so that a test can say which driver
 * calls a launch costs and how much host time the runtime itself spends around them.
 *
 * "Device memory" is host memory: cuMemAlloc returns a host address, and the stream's memory
 * operations (writes, copies) happen at once, in the call. Every event is complete. A launch
 * of a wrapper ends at once: the stub writes a run time into the launch's host mirror, as the
 * wrapper's last block would (the offsets come from CUPREEMPT_STUB_HOST_OFFSET, the offset of
 * `host` in the wrapper's first parameter, and CUPREEMPT_STUB_RUN_NS_OFFSET, that of `run_ns`
 * in the mirror).
 *
 * Exported beside the driver's calls: cupreempt_stub_calls(name) (how many times `name` was
 * called), cupreempt_stub_call_name(i) (the calls it has) and cupreempt_stub_reset(). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum { OK = 0, NOT_FOUND = 500, INVALID_VALUE = 1, NOT_READY = 600 };

#define CALLS(X)                                                                    \
  X(cuInit) X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuFuncGetName) X(cuCtxGetCurrent)  \
  X(cuCtxSetCurrent) X(cuCtxGetDevice) X(cuCtxGetStreamPriorityRange) X(cuMemFreeHost)  \
  X(cuMemHostAlloc) X(cuMemHostGetDevicePointer_v2) X(cuMemAlloc_v2) X(cuMemFree_v2)    \
  X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoH_v2) X(cuLibraryLoadData) X(cuLibraryGetKernel)  \
  X(cuKernelGetFunction) X(cuFuncLoad) X(cuFuncGetParamInfo) X(cuFuncGetAttribute)       \
  X(cuFuncSetAttribute) X(cuThreadExchangeStreamCaptureMode) X(cuStreamWriteValue32)     \
  X(cuStreamWriteValue32_v2) X(cuStreamWaitValue32) X(cuStreamWaitValue32_v2)            \
  X(cuStreamBatchMemOp) X(cuStreamBatchMemOp_v2) X(cuStreamWaitEvent)                    \
  X(cuStreamSynchronize) X(cuStreamIsCapturing) X(cuStreamGetPriority) X(cuStreamGetId)  \
  X(cuStreamCreateWithPriority) X(cuStreamDestroy_v2) X(cuModuleLoadData)               \
  X(cuModuleUnload) X(cuModuleGetFunction) X(cuEventCreate) X(cuEventRecord)             \
  X(cuEventQuery) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuEventDestroy_v2)       \
  X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetAttribute)       \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2)                           \
  X(cuDevicePrimaryCtxGetState) X(cuOccupancyMaxActiveBlocksPerMultiprocessor)          \
  X(cuGetErrorName) X(cuCtxGetId)

#define AS_ENUM(name) C_##name,
enum { CALLS(AS_ENUM) N_CALLS };
#define AS_NAME(name) #name,
static const char* const NAMES[N_CALLS] = {CALLS(AS_NAME)};
static unsigned long long counts[N_CALLS];
#define COUNT(name) __atomic_fetch_add(&counts[C_##name], 1, __ATOMIC_RELAXED)

unsigned long long cupreempt_stub_calls(const char* name) {
  for (int i = 0; i < N_CALLS; i++)
    if (strcmp(NAMES[i], name) == 0) return __atomic_load_n(&counts[i], __ATOMIC_RELAXED);
  return ~0ull; /* not a call the stub has */
}

/* The calls the stub has, by index (null past the last), so that a test needs no list of its own. */
const char* cupreempt_stub_call_name(unsigned i) { return i < N_CALLS ? NAMES[i] : 0; }

void cupreempt_stub_reset(void) {
  for (int i = 0; i < N_CALLS; i++) __atomic_store_n(&counts[i], 0, __ATOMIC_RELAXED);
}

/* CUPREEMPT_STUB_ZEROING_PENDING=1: the event recorded right after a copy (a slab's zeroing)
 * stays not ready until the next copy, as a zeroing still running on the GPU would. */
static int copy_just_made;
static void* pending_zeroing;

/* Handles: one context, and streams numbered as the driver's ids. The context's id changes
 * where a test replaces the context (cupreempt_stub_replace_context: a reset device's new
 * primary context at the old address). */
static char the_context;
static unsigned long long the_context_id = 41;
void cupreempt_stub_replace_context(void) { __atomic_fetch_add(&the_context_id, 1, __ATOMIC_RELAXED); }
static unsigned long long next_stream_id = 16;
struct stream { unsigned long long id; int priority; };
struct event { int recorded; };

static long env_offset(const char* name) {
  const char* v = getenv(name);
  return v ? strtol(v, NULL, 10) : -1;
}

/* What a wrapper's last block leaves: the launch's run time in its host mirror. */
static void wrapper_ends(void** params) {
  static long host_offset = -2, run_ns_offset = -2;
  if (host_offset == -2) {
    host_offset = env_offset("CUPREEMPT_STUB_HOST_OFFSET");
    run_ns_offset = env_offset("CUPREEMPT_STUB_RUN_NS_OFFSET");
  }
  if (!params || !params[0] || host_offset < 0 || run_ns_offset < 0) return;
  uint64_t host;
  memcpy(&host, (const char*)params[0] + host_offset, sizeof host);
  if (host) {
    uint64_t run_ns = 1000;
    memcpy((char*)(uintptr_t)host + run_ns_offset, &run_ns, sizeof run_ns);
  }
}

CUresult cuInit(unsigned flags) { (void)flags; COUNT(cuInit); return OK; }
CUresult cuDriverGetVersion(int* v) { COUNT(cuDriverGetVersion); *v = 13000; return OK; }
CUresult cuGetErrorName(CUresult e, const char** s) {
  (void)e;
  COUNT(cuGetErrorName);
  *s = "CUDA_ERROR_STUB";
  return OK;
}
CUresult cuDeviceGet(int* d, int ordinal) { COUNT(cuDeviceGet); *d = ordinal; return OK; }
CUresult cuDeviceGetCount(int* n) { COUNT(cuDeviceGetCount); *n = 1; return OK; }
CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
  (void)dev;
  COUNT(cuDeviceGetAttribute);
  switch (attr) {
    case 1: *v = 1024; break;           /* max threads per block */
    case 2: case 3: *v = 1024; break;   /* max block x, y */
    case 4: *v = 64; break;             /* max block z */
    case 5: *v = 2147483647; break;     /* max grid x */
    case 6: case 7: *v = 65535; break;  /* max grid y, z */
    case 16: *v = 132; break;           /* SMs */
    case 75: *v = 9; break;             /* compute capability */
    case 76: *v = 0; break;
    default: *v = 0;                    /* MPS off, and anything else */
  }
  return OK;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  (void)dev;
  COUNT(cuDevicePrimaryCtxRetain);
  *ctx = &the_context;
  return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; COUNT(cuDevicePrimaryCtxRelease_v2); return OK; }
CUresult cuDevicePrimaryCtxGetState(int dev, unsigned* flags, int* active) {
  (void)dev;
  COUNT(cuDevicePrimaryCtxGetState);
  *flags = 0;
  *active = 1;
  return OK;
}
CUresult cuCtxGetCurrent(void** ctx) { COUNT(cuCtxGetCurrent); *ctx = &the_context; return OK; }
CUresult cuCtxGetId(void* ctx, unsigned long long* id) {
  COUNT(cuCtxGetId);
  if (ctx != &the_context) return INVALID_VALUE;
  *id = __atomic_load_n(&the_context_id, __ATOMIC_RELAXED);
  return OK;
}
CUresult cuCtxSetCurrent(void* ctx) { (void)ctx; COUNT(cuCtxSetCurrent); return OK; }
CUresult cuCtxGetDevice(int* d) { COUNT(cuCtxGetDevice); *d = 0; return OK; }
CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  COUNT(cuCtxGetStreamPriorityRange);
  *least = 0;
  *greatest = -5;
  return OK;
}

CUresult cuMemHostAlloc(void** p, size_t n, unsigned flags) {
  (void)flags;
  COUNT(cuMemHostAlloc);
  *p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
  if (!*p) return 2;
  memset(*p, 0, n);
  return OK;
}
CUresult cuMemFreeHost(void* p) { COUNT(cuMemFreeHost); free(p); return OK; }
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* d, void* p, unsigned flags) {
  (void)flags;
  COUNT(cuMemHostGetDevicePointer_v2);
  *d = (CUdeviceptr)(uintptr_t)p;
  return OK;
}
CUresult cuMemAlloc_v2(CUdeviceptr* d, size_t n) {
  COUNT(cuMemAlloc_v2);
  void* p = aligned_alloc(256, (n + 255) / 256 * 256);
  if (!p) return 2;
  memset(p, 0, n);
  *d = (CUdeviceptr)(uintptr_t)p;
  return OK;
}
CUresult cuMemFree_v2(CUdeviceptr d) { COUNT(cuMemFree_v2); free((void*)(uintptr_t)d); return OK; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, void* stream) {
  (void)stream;
  COUNT(cuMemcpyHtoDAsync_v2);
  memcpy((void*)(uintptr_t)d, s, n);
  copy_just_made = 1;
  return OK;
}
CUresult cuMemcpyDtoH_v2(void* d, CUdeviceptr s, size_t n) {
  COUNT(cuMemcpyDtoH_v2);
  memcpy(d, (const void*)(uintptr_t)s, n);
  return OK;
}

/* Functions: any non-null handle is a function; its attributes are a small kernel's. */
CUresult cuFuncGetAttribute(int* v, int attr, void* f) {
  (void)f;
  COUNT(cuFuncGetAttribute);
  switch (attr) {
    case 0: *v = 1024; break;  /* max threads per block */
    case 4: *v = 32; break;    /* registers */
    case 5: case 6: *v = 90; break; /* PTX and binary version */
    case 8: *v = 0; break;     /* max dynamic shared memory */
    default: *v = 0;
  }
  return OK;
}
CUresult cuFuncSetAttribute(void* f, int attr, int v) { (void)f; (void)attr; (void)v; COUNT(cuFuncSetAttribute); return OK; }
CUresult cuFuncGetName(const char** name, void* f) { (void)f; COUNT(cuFuncGetName); *name = "stub_kernel"; return OK; }
CUresult cuFuncLoad(void* f) { (void)f; COUNT(cuFuncLoad); return OK; }
CUresult cuFuncGetParamInfo(void* f, size_t i, size_t* offset, size_t* size) {
  (void)f;
  COUNT(cuFuncGetParamInfo);
  if (i > 0) return INVALID_VALUE;
  *offset = 0;
  *size = 4096; /* longer than any version of the launch parameters */
  return OK;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, void* f, int threads, size_t smem) {
  (void)f;
  (void)smem;
  COUNT(cuOccupancyMaxActiveBlocksPerMultiprocessor);
  *n = threads > 0 ? (2048 / threads < 32 ? 2048 / threads : 32) : 0;
  return OK;
}
CUresult cuModuleLoadData(void** m, const void* image) {
  (void)image;
  COUNT(cuModuleLoadData);
  *m = malloc(1);
  return OK;
}
CUresult cuModuleUnload(void* m) { COUNT(cuModuleUnload); free(m); return OK; }
CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
  (void)name;
  COUNT(cuModuleGetFunction);
  *f = m;
  return OK;
}
CUresult cuLibraryLoadData(void** lib, const void* code, void* a, void* b, unsigned c, void* d,
                           void* e, unsigned g) {
  (void)code; (void)a; (void)b; (void)c; (void)d; (void)e; (void)g;
  COUNT(cuLibraryLoadData);
  *lib = malloc(1);
  return OK;
}
CUresult cuLibraryGetKernel(void** k, void* lib, const char* name) {
  (void)lib;
  (void)name;
  COUNT(cuLibraryGetKernel);
  return NOT_FOUND;
  (void)k;
}
CUresult cuKernelGetFunction(void** f, void* k) { COUNT(cuKernelGetFunction); *f = k; return OK; }

CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, void* stream, void** params, void** extra) {
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)smem;
  (void)stream; (void)extra;
  COUNT(cuLaunchKernel);
  wrapper_ends(params);
  return OK;
}
CUresult cuLaunchKernelEx(const void* config, void* f, void** params, void** extra) {
  (void)config; (void)f; (void)extra;
  COUNT(cuLaunchKernelEx);
  wrapper_ends(params);
  return OK;
}

CUresult cuThreadExchangeStreamCaptureMode(int* mode) {
  COUNT(cuThreadExchangeStreamCaptureMode);
  *mode = 0;
  return OK;
}
CUresult cuStreamCreateWithPriority(void** s, unsigned flags, int priority) {
  (void)flags;
  COUNT(cuStreamCreateWithPriority);
  struct stream* st = malloc(sizeof *st);
  if (!st) return 2;
  st->id = __atomic_fetch_add(&next_stream_id, 1, __ATOMIC_RELAXED);
  st->priority = priority;
  *s = st;
  return OK;
}
CUresult cuStreamDestroy_v2(void* s) { COUNT(cuStreamDestroy_v2); free(s); return OK; }
/* The null stream and the legacy and per-thread handles (0, 1, 2) are no allocation. */
static int special(void* s) { return (uintptr_t)s <= 2; }
CUresult cuStreamGetId(void* s, unsigned long long* id) {
  COUNT(cuStreamGetId);
  *id = special(s) ? (uintptr_t)s : ((struct stream*)s)->id;
  return OK;
}
CUresult cuStreamGetPriority(void* s, int* p) {
  COUNT(cuStreamGetPriority);
  *p = special(s) ? 0 : ((struct stream*)s)->priority;
  return OK;
}
CUresult cuStreamIsCapturing(void* s, int* status) { (void)s; COUNT(cuStreamIsCapturing); *status = 0; return OK; }
CUresult cuStreamSynchronize(void* s) { (void)s; COUNT(cuStreamSynchronize); return OK; }
CUresult cuStreamWaitEvent(void* s, void* e, unsigned f) { (void)s; (void)e; (void)f; COUNT(cuStreamWaitEvent); return OK; }
CUresult cuStreamWriteValue32(void* s, CUdeviceptr a, unsigned v, unsigned f) {
  (void)s; (void)f;
  COUNT(cuStreamWriteValue32);
  __atomic_store_n((unsigned*)(uintptr_t)a, v, __ATOMIC_SEQ_CST);
  return OK;
}
CUresult cuStreamWriteValue32_v2(void* s, CUdeviceptr a, unsigned v, unsigned f) {
  (void)s; (void)f;
  COUNT(cuStreamWriteValue32_v2);
  __atomic_store_n((unsigned*)(uintptr_t)a, v, __ATOMIC_SEQ_CST);
  return OK;
}
CUresult cuStreamWaitValue32(void* s, CUdeviceptr a, unsigned v, unsigned f) {
  (void)s; (void)a; (void)v; (void)f;
  COUNT(cuStreamWaitValue32);
  return OK;
}
CUresult cuStreamWaitValue32_v2(void* s, CUdeviceptr a, unsigned v, unsigned f) {
  (void)s; (void)a; (void)v; (void)f;
  COUNT(cuStreamWaitValue32_v2);
  return OK;
}
/* CUstreamBatchMemOpParams: 48 bytes; a 32-bit write has operation 2 at 0, the address at 8,
 * the value at 16. */
static void batch(unsigned n, const unsigned char* ops) {
  for (unsigned i = 0; i < n; i++) {
    const unsigned char* op = ops + 48 * (size_t)i;
    unsigned kind, value;
    CUdeviceptr address;
    memcpy(&kind, op, 4);
    memcpy(&address, op + 8, 8);
    memcpy(&value, op + 16, 4);
    if (kind == 2) __atomic_store_n((unsigned*)(uintptr_t)address, value, __ATOMIC_SEQ_CST);
  }
}
CUresult cuStreamBatchMemOp(void* s, unsigned n, void* ops, unsigned f) {
  (void)s; (void)f;
  COUNT(cuStreamBatchMemOp);
  batch(n, ops);
  return OK;
}
CUresult cuStreamBatchMemOp_v2(void* s, unsigned n, void* ops, unsigned f) {
  (void)s; (void)f;
  COUNT(cuStreamBatchMemOp_v2);
  batch(n, ops);
  return OK;
}

CUresult cuEventCreate(void** e, unsigned flags) {
  (void)flags;
  COUNT(cuEventCreate);
  *e = calloc(1, sizeof(struct event));
  return *e ? OK : 2;
}
CUresult cuEventDestroy_v2(void* e) { COUNT(cuEventDestroy_v2); free(e); return OK; }
static int zeroing_pends(void) {
  static int on = -1;
  if (on < 0) on = getenv("CUPREEMPT_STUB_ZEROING_PENDING") != NULL;
  return on;
}
CUresult cuEventRecord(void* e, void* s) {
  (void)s;
  COUNT(cuEventRecord);
  ((struct event*)e)->recorded = 1;
  if (copy_just_made && zeroing_pends()) pending_zeroing = e;
  copy_just_made = 0;
  return OK;
}
CUresult cuEventQuery(void* e) {
  COUNT(cuEventQuery);
  return e == pending_zeroing ? NOT_READY : OK;
}
CUresult cuEventSynchronize(void* e) { (void)e; COUNT(cuEventSynchronize); return OK; }
CUresult cuEventElapsedTime(float* ms, void* a, void* b) {
  (void)a; (void)b;
  COUNT(cuEventElapsedTime);
  *ms = 0.001f;
  return OK;
}
