// Probe: what the runtime's one-time setup steps cost in a fresh process, each timed on the
// host clock right after the context is made: pinned host allocations (mapped or not, first
// and later ones, and registering ordinary memory) and stream creation. Backs the choices of
// the runtime's setup (docs/runtime.md, "First launch").
//   nvcc -arch=sm_90 -O2 -o probe scripts/probes/pinned_setup.cu -lcuda && ./probe
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <cuda_runtime.h>

static double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

#define TIME(label, stmt)                                  \
  do {                                                     \
    double t0_ = now_us();                                 \
    stmt;                                                  \
    std::printf("%-44s %9.1f us\n", label, now_us() - t0_); \
  } while (0)

int main(int argc, char** argv) {
  const int order = argc > 1 ? std::atoi(argv[1]) : 0;
  TIME("context (cudaFree(0))", cudaFree(0));
  void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
  if (order == 1) TIME("stream first (priority)", { cudaStream_t s; cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -5); });
  TIME("cudaHostAlloc 132 KiB mapped (first)", cudaHostAlloc(&a, 132 << 10, cudaHostAllocMapped));
  TIME("cudaHostAlloc 132 KiB mapped (second)", cudaHostAlloc(&b, 132 << 10, cudaHostAllocMapped));
  TIME("cudaHostAlloc 4 KiB default", cudaHostAlloc(&c, 4 << 10, cudaHostAllocDefault));
  void* m = std::aligned_alloc(4096, 1 << 20);
  TIME("cudaHostRegister 1 MiB mapped", cudaHostRegister(m, 1 << 20, cudaHostRegisterMapped));
  TIME("cudaHostAlloc 2 MiB mapped", cudaHostAlloc(&d, 2 << 20, cudaHostAllocMapped));
  for (int i = 0; i < 3; ++i)
    TIME("stream create (nonblocking, priority)", { cudaStream_t s; cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, i ? 0 : -5); });
  TIME("event create (no timing)", { cudaEvent_t e; cudaEventCreateWithFlags(&e, cudaEventDisableTiming); });
  void* dm = nullptr;
  TIME("cudaMalloc 32 KiB", cudaMalloc(&dm, 32 << 10));
  TIME("cudaMemsetAsync on stream 0", cudaMemsetAsync(dm, 0, 32 << 10, 0));
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("status %s\n", cudaGetErrorString(e));
  return 0;
}
