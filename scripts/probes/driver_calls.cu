// Probe: the host time of each driver and runtime call that a launch through cupreempt may
// make, each repeated alone (the calls' own cost, to say which are worth saving or caching).
// Each call N times in a row, host clock, µs per call; median of R rounds. Launches of an
// empty one-block kernel are there for scale: `launch`, and the runtime's form of it
// (`cuLaunchKernelEx` with programmatic stream serialization).
// Build and run (scripts/probes/driver_calls.sh does it):
//   nvcc -arch=sm_90 -O2 -std=c++17 scripts/probes/driver_calls.cu -lcuda -o driver_calls
//   ./driver_calls [N [R]]
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "probe.cuh"

__global__ void empty_kernel() {}

static double per_call_us(int n, const std::function<void()>& call) {
  const double t0 = host_now_us();
  for (int i = 0; i < n; ++i) call();
  return (host_now_us() - t0) / n;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  CHECK(cudaFree(0));
  cudaStream_t created;
  CHECK(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
  CUcontext ctx = nullptr;
  CU_CHECK(cuCtxGetCurrent(&ctx));
  CUevent done, recorded;
  CU_CHECK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  CU_CHECK(cuEventCreate(&recorded, CU_EVENT_DISABLE_TIMING));
  CU_CHECK(cuEventRecord(done, created));
  CHECK(cudaDeviceSynchronize());
  CUfunction f = nullptr;
  CHECK(cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t*>(&f), (const void*)empty_kernel));
  CUlaunchAttribute pss{};
  pss.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  pss.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 32;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = (CUstream)created;
  cfg.attrs = &pss;
  cfg.numAttrs = 1;

  struct Call {
    const char* name;
    std::function<void()> run;
    bool drains;  // launches: synchronize after each round
  };
  CUcontext c;
  unsigned long long id;
  unsigned long long sid;
  CUstreamCaptureStatus capturing;
  int priority;
  int device;
  cudaFunction_t looked_up;
  const std::vector<Call> calls = {
      {"cuCtxGetCurrent", [&] { cuCtxGetCurrent(&c); }, false},
      {"cuCtxGetId", [&] { cuCtxGetId(ctx, &id); }, false},
      {"cuCtxGetCurrent+cuCtxGetId", [&] { cuCtxGetCurrent(&c); cuCtxGetId(c, &id); }, false},
      {"cudaGetDevice", [&] { cudaGetDevice(&device); }, false},
      {"cuStreamGetId(legacy)", [&] { cuStreamGetId(nullptr, &sid); }, false},
      {"cuStreamGetId(created)", [&] { cuStreamGetId((CUstream)created, &sid); }, false},
      {"cuStreamIsCapturing(legacy)", [&] { cuStreamIsCapturing(nullptr, &capturing); }, false},
      {"cuStreamIsCapturing(created)",
       [&] { cuStreamIsCapturing((CUstream)created, &capturing); }, false},
      {"cuStreamGetPriority(created)",
       [&] { cuStreamGetPriority((CUstream)created, &priority); }, false},
      {"cuEventQuery(done)", [&] { cuEventQuery(done); }, false},
      {"cuEventRecord(created)", [&] { cuEventRecord(recorded, (CUstream)created); }, true},
      {"cudaGetFuncBySymbol",
       [&] { cudaGetFuncBySymbol(&looked_up, (const void*)empty_kernel); }, false},
      {"cuLaunchKernel", [&] {
         cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, (CUstream)created, nullptr, nullptr);
       }, true},
      {"cuLaunchKernelEx(pss)", [&] { cuLaunchKernelEx(&cfg, f, nullptr, nullptr); }, true},
      {"<<<>>>", [&] { empty_kernel<<<1, 32, 0, created>>>(); }, true},
  };
  std::printf("%-32s %10s (median of %d rounds of %d calls, µs per call)\n", "call", "µs", rounds,
              n);
  for (const Call& call : calls) {
    std::vector<double> r;
    for (int k = 0; k < rounds; ++k) {
      r.push_back(per_call_us(n, call.run));
      if (call.drains) CHECK(cudaStreamSynchronize(created));
    }
    std::sort(r.begin(), r.end());
    std::printf("%-32s %10.3f\n", call.name, r[r.size() / 2]);
  }
  CHECK(cudaGetLastError());
  // What a device reset does to the context's address and id (the launch shim keys the
  // functions it looked up by the id, the runtime its per-context state).
  unsigned long long before = 0, after = 0;
  CU_CHECK(cuCtxGetId(ctx, &before));
  CHECK(cudaDeviceReset());
  CHECK(cudaFree(0));
  CUcontext again = nullptr;
  CU_CHECK(cuCtxGetCurrent(&again));
  CU_CHECK(cuCtxGetId(again, &after));
  std::printf("after cudaDeviceReset: context address %s, id %llu -> %llu\n",
              again == ctx ? "the same" : "another", before, after);
  return 0;
}
