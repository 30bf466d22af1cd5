// Probe: whether a CUDA green context (CUDA 12.4+: a context given a partition of the SMs)
// holds a kernel of the program's own module to its SMs, and whether two partitions' kernels
// run side by side on disjoint SMs. The shares experiment found that SM shares set by command
// are bounded by where the GPU first places a persistent grid (docs/daemon.md); a launch on a
// partition's stream would be placed there by the hardware instead. No cupreempt code.
//
// Usage: green_partition SPLIT_SMS [SPIN_US [GROUP LAUNCHES]]
//   Splits the device's SMs into groups of SPLIT_SMS (the driver rounds to its granularity),
//   makes a green context and a stream on each of the first two, and launches a kernel whose
//   blocks each spin SPIN_US (default 200) and record their %smid: on the primary context,
//   on the first partition alone, and on both partitions at once. Prints, per launch, the SMs
//   used (count, lowest, highest), the SMs outside the partition, and the launch's GPU time.
//   With GROUP (0 or 1): only that partition, LAUNCHES whole-GPU grids back to back on it;
//   prints the partition's SM ids and the launches' median time (two processes under MPS,
//   each given another group: green_partition.sh's `mps` part).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <vector>

#include "probe.cuh"


__global__ void record(unsigned* smid_of_block, unsigned long long spin_ns,
                       unsigned long long* span) {
  const unsigned long long t0 = now_ns();
  while (now_ns() - t0 < spin_ns) {
  }
  if (threadIdx.x == 0) {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    smid_of_block[blockIdx.x] = s;
    atomicMin(&span[0], t0);
    atomicMax(&span[1], now_ns());
  }
}

// One launch of `record`: its buffers (made in the primary context, which green contexts share),
// the launch with its context current, and what the blocks recorded once its stream is done.
struct Recorded {
  unsigned grid;
  unsigned* smids = nullptr;
  unsigned long long* span = nullptr;  // the first block's start, the last block's end
  explicit Recorded(unsigned grid) : grid(grid) {
    CHECK(cudaMalloc(&smids, sizeof(unsigned) * grid));
    CHECK(cudaMalloc(&span, 2 * sizeof(unsigned long long)));
  }
  ~Recorded() {
    cudaFree(smids);
    cudaFree(span);
  }
  Recorded(const Recorded&) = delete;
  Recorded& operator=(const Recorded&) = delete;
  // The span's start value, before each launch (with the primary context current).
  void reset() {
    const unsigned long long init[2] = {~0ull, 0};
    CHECK(cudaMemcpy(span, init, sizeof init, cudaMemcpyHostToDevice));
  }
  void launch(CUfunction f, CUcontext ctx, CUstream stream, unsigned threads,
              unsigned long long spin) {
    CU_CHECK(cuCtxSetCurrent(ctx));
    void* args[] = {&smids, &spin, &span};
    CU_CHECK(cuLaunchKernel(f, grid, 1, 1, threads, 1, 1, 0, stream, args, nullptr));
  }
  // What the blocks recorded (with the primary context current, after its stream is done).
  struct Seen {
    std::set<unsigned> sms;
    unsigned long long start, end;
    double ms() const { return (end - start) / 1e6; }
  };
  Seen seen() const {
    std::vector<unsigned> h(grid);
    unsigned long long t[2];
    CHECK(cudaMemcpy(h.data(), smids, h.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(t, span, sizeof t, cudaMemcpyDeviceToHost));
    return {std::set<unsigned>(h.begin(), h.end()), t[0], t[1]};
  }
};

struct Launch {
  const char* label;
  CUcontext ctx;   // current while launching (the primary context, or a green one)
  CUstream stream;
  unsigned grid;
  std::set<unsigned> allowed;  // empty: any SM
};

// The SMs a context's kernels may use: one 32-thread block per block slot of the GPU, each
// just long enough to be resident with the others.
static std::set<unsigned> sms_of(CUcontext primary, CUcontext ctx, CUstream stream, CUfunction f,
                                 unsigned sms) {
  Recorded r(sms * 32);
  r.reset();
  r.launch(f, ctx, stream, 32, 20000);
  CU_CHECK(cuStreamSynchronize(stream));
  CU_CHECK(cuCtxSetCurrent(primary));
  return r.seen().sms;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: green_partition SPLIT_SMS [SPIN_US]\n");
    return 2;
  }
  const unsigned split = (unsigned)atoi(argv[1]);
  const unsigned long long spin_ns = (argc > 2 ? atoll(argv[2]) : 200) * 1000ull;
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(0));
  CUdevice dev;
  CU_CHECK(cuDeviceGet(&dev, 0));
  CUcontext primary;
  CU_CHECK(cuCtxGetCurrent(&primary));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));

  CUdevResource all;
  CU_CHECK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  CUdevResource groups[2], rest;
  unsigned n = 2;
  CU_CHECK(cuDevSmResourceSplitByCount(groups, &n, &all, &rest, 0, split));
  printf("device: %d SMs; split by %u: %u groups of %u and %u SMs, %u left\n", sms, split, n,
         groups[0].sm.smCount, n > 1 ? groups[1].sm.smCount : 0, rest.sm.smCount);
  if (n < 2) {
    printf("fewer than two groups: nothing to put side by side\n");
    return 1;
  }
  CUcontext green[2];
  CUstream gstream[2];
  for (int i = 0; i < 2; ++i) {
    CUdevResourceDesc desc;
    CU_CHECK(cuDevResourceGenerateDesc(&desc, &groups[i], 1));
    CUgreenCtx g;
    CU_CHECK(cuGreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CU_CHECK(cuCtxFromGreenCtx(&green[i], g));
    CU_CHECK(cuGreenCtxStreamCreate(&gstream[i], g, CU_STREAM_NON_BLOCKING, 0));
  }
  CU_CHECK(cuCtxSetCurrent(primary));
  CUfunction f;
  CHECK(cudaGetFuncBySymbol((cudaFunction_t*)&f, (const void*)record));
  CUstream pstream;
  CU_CHECK(cuStreamCreate(&pstream, CU_STREAM_NON_BLOCKING));

  // The SMs each partition's kernels may land on, found by launching there.
  std::set<unsigned> part[2];
  for (int i = 0; i < 2; ++i) part[i] = sms_of(primary, green[i], gstream[i], f, (unsigned)sms);
  unsigned shared = 0;
  for (unsigned s : part[0]) shared += part[1].count(s);
  printf("partition SMs: first %zu [%u, %u], second %zu [%u, %u], in both %u\n", part[0].size(),
         *part[0].begin(), *part[0].rbegin(), part[1].size(), *part[1].begin(),
         *part[1].rbegin(), shared);

  const unsigned per_sm = 8, threads = 256;
  if (argc > 4) {
    // One partition, launches back to back (another process may hold the other partition).
    const int k = atoi(argv[3]) ? 1 : 0;
    const int launches = atoi(argv[4]);
    printf("group %d SMs:", k);
    for (unsigned s : part[k]) printf(" %u", s);
    printf("\n");
    const unsigned grid = per_sm * (unsigned)sms;
    Recorded r(grid);
    std::vector<double> ms;
    std::set<unsigned> used;
    for (int i = 0; i < launches; ++i) {
      r.reset();
      r.launch(f, green[k], gstream[k], threads, spin_ns);
      CU_CHECK(cuStreamSynchronize(gstream[k]));
      CU_CHECK(cuCtxSetCurrent(primary));
      const Recorded::Seen seen = r.seen();
      used.insert(seen.sms.begin(), seen.sms.end());
      ms.push_back(seen.ms());
    }
    std::sort(ms.begin(), ms.end());
    unsigned outside = 0;
    for (unsigned s : used) outside += !part[k].count(s);
    printf("group %d: %d launches of %u blocks, median %.3f ms, SMs used %zu, outside %u\n", k,
           launches, grid, ms[ms.size() / 2], used.size(), outside);
    return 0;
  }

  // Persistent-sized grids (8 blocks of 256 threads per SM of what they may use), each block
  // spinning spin_ns: alone on the primary context, on the first partition alone, then on
  // both partitions at once.
  auto run = [&](const std::vector<Launch>& launches) {
    std::vector<std::unique_ptr<Recorded>> rec;
    for (auto& l : launches) {
      rec.push_back(std::make_unique<Recorded>(l.grid));
      rec.back()->reset();
    }
    for (size_t i = 0; i < launches.size(); ++i)
      rec[i]->launch(f, launches[i].ctx, launches[i].stream, threads, spin_ns);
    for (auto& l : launches) CU_CHECK(cuStreamSynchronize(l.stream));
    CU_CHECK(cuCtxSetCurrent(primary));
    unsigned long long first = ~0ull, last = 0;
    for (size_t i = 0; i < launches.size(); ++i) {
      const Launch& l = launches[i];
      const Recorded::Seen seen = rec[i]->seen();
      unsigned outside = 0;
      for (unsigned s : seen.sms) outside += !l.allowed.empty() && !l.allowed.count(s);
      printf("  %-34s grid %5u: SMs used %3zu [%3u, %3u], outside its partition %u, %.3f ms\n",
             l.label, l.grid, seen.sms.size(), *seen.sms.begin(), *seen.sms.rbegin(), outside,
             seen.ms());
      first = std::min(first, seen.start);
      last = std::max(last, seen.end);
    }
    if (launches.size() > 1) printf("  together: %.3f ms\n", (last - first) / 1e6);
  };
  const unsigned whole = per_sm * (unsigned)sms;
  const unsigned g0 = per_sm * (unsigned)part[0].size(), g1 = per_sm * (unsigned)part[1].size();
  printf("primary context alone:\n");
  run({{"primary, whole-GPU grid", primary, pstream, whole, {}}});
  printf("first partition alone:\n");
  run({{"first partition, whole-GPU grid", green[0], gstream[0], whole, part[0]}});
  run({{"first partition, its own grid", green[0], gstream[0], g0, part[0]}});
  printf("both partitions at once:\n");
  run({{"first partition, whole-GPU grid", green[0], gstream[0], whole, part[0]},
       {"second partition, whole-GPU grid", green[1], gstream[1], whole, part[1]}});
  run({{"first partition, its own grid", green[0], gstream[0], g0, part[0]},
       {"second partition, its own grid", green[1], gstream[1], g1, part[1]}});
  printf("a partition beside the primary context:\n");
  run({{"primary, whole-GPU grid", primary, pstream, whole, {}},
       {"second partition, its own grid", green[1], gstream[1], g1, part[1]}});
  return 0;
}
