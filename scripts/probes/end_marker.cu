// Probe: what marks a launch's end in its stream costs, and whether it keeps the next launch
// from overlapping. The runtime marks each preemptible launch's end so that it can reuse the
// launch's control block (docs/runtime.md, "Launch cost"). Back-to-back launches of one kernel
// on one stream, each followed by one marker:
//   none     nothing;
//   event    cuEventRecord of a pooled event (what the runtime records);
//   event_id cuEventRecord and cuStreamGetId (the runtime names the event's stream);
//   write32  cuStreamWriteValue32 of the launch's number into pinned, device-mapped memory;
//   write64  cuStreamWriteValue64 likewise.
// Each with and without programmatic stream serialization (the kernel waits with
// griddepcontrol.wait, as the task loop does). Prints, per marker and form, the host time per
// launch and marker (enqueue) and the time per launch until the stream is done (with the GPU),
// medians of PROBE_ROUNDS rounds. A kernel of PROBE_SPIN_NS per block makes the GPU the
// bottleneck (then the second figure shows the gaps between launches); 0 makes the host one.
// Also checks that every write marker landed: the last number written must be the last
// launch's. scripts/probes/end_marker.sh builds and runs it.
#include <algorithm>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>
#include <vector>

#include "probe.cuh"

__global__ void spin(unsigned long long spin_ns, unsigned* sink) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const unsigned long long start = now_ns();
  unsigned long long now;
  do {
    now = now_ns();
  } while (now - start < spin_ns);
  if (threadIdx.x == 0 && now == 0) *sink = 1;  // never: keeps the loop
}

int main() {
  const int launches = env_int("PROBE_LAUNCHES", 300), rounds = env_int("PROBE_ROUNDS", 7);
  const int blocks = env_int("PROBE_BLOCKS", 132), threads = 128;
  const unsigned long long spin_ns = (unsigned long long)env_int("PROBE_SPIN_NS", 0);
  CHECK(cudaFree(nullptr));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  unsigned* sink;
  CHECK(cudaMalloc(&sink, 4));
  unsigned long long* words;
  CHECK(cudaHostAlloc(&words, 64, cudaHostAllocMapped));
  std::memset(words, 0, 64);
  unsigned long long* words_dev;
  CHECK(cudaHostGetDevicePointer(&words_dev, words, 0));
  std::vector<cudaEvent_t> events(launches);
  for (auto& ev : events) CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const char* markers[] = {"none", "event", "event_id", "write32", "write64"};
  for (int pdl = 0; pdl < 2; ++pdl) {
    for (const char* marker : markers) {
      std::vector<double> enqueue, total;
      for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up
        CHECK(cudaStreamSynchronize(stream));
        std::memset(words, 0, 64);
        const double t0 = host_now_us();
        for (int i = 0; i < launches; ++i) {
          cudaLaunchAttribute attr{};
          attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
          attr.val.programmaticStreamSerializationAllowed = 1;
          cudaLaunchConfig_t cfg{};
          cfg.gridDim = dim3(blocks);
          cfg.blockDim = dim3(threads);
          cfg.stream = stream;
          cfg.attrs = &attr;
          cfg.numAttrs = pdl;
          CHECK(cudaLaunchKernelEx(&cfg, spin, spin_ns, sink));
          const unsigned number = (unsigned)i + 1;
          if (!std::strcmp(marker, "event")) {
            CU_CHECK(cuEventRecord((CUevent)events[i], (CUstream)stream));
          } else if (!std::strcmp(marker, "event_id")) {
            CU_CHECK(cuEventRecord((CUevent)events[i], (CUstream)stream));
            unsigned long long id;
            CU_CHECK(cuStreamGetId((CUstream)stream, &id));
          } else if (!std::strcmp(marker, "write32")) {
            CU_CHECK(cuStreamWriteValue32((CUstream)stream, (CUdeviceptr)words_dev, number, 0));
          } else if (!std::strcmp(marker, "write64")) {
            CU_CHECK(cuStreamWriteValue64((CUstream)stream, (CUdeviceptr)(words_dev + 1), number, 0));
          }
        }
        const double t1 = host_now_us();
        CHECK(cudaStreamSynchronize(stream));
        const double t2 = host_now_us();
        if (!std::strcmp(marker, "write32") && (unsigned)words[0] != (unsigned)launches) {
          std::fprintf(stderr, "write32: last marker %u, not %d\n", (unsigned)words[0], launches);
          return 1;
        }
        if (!std::strcmp(marker, "write64") && words[1] != (unsigned long long)launches) {
          std::fprintf(stderr, "write64: last marker %llu, not %d\n", words[1], launches);
          return 1;
        }
        if (r == 0) continue;
        enqueue.push_back((t1 - t0) / launches);
        total.push_back((t2 - t0) / launches);
      }
      std::sort(enqueue.begin(), enqueue.end());
      std::sort(total.begin(), total.end());
      std::printf("spin_ns %llu pdl %d marker %-8s enqueue_us %.3f with_gpu_us %.3f\n", spin_ns,
                  pdl, marker, enqueue[enqueue.size() / 2], total[total.size() / 2]);
    }
  }
  return 0;
}
