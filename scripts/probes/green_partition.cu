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

struct Launch {
  const char* label;
  CUcontext ctx;   // current while launching (the primary context, or a green one)
  CUstream stream;
  unsigned grid;
  std::set<unsigned> allowed;  // empty: any SM
  unsigned* smids = nullptr;
  unsigned long long* span = nullptr;
};

static std::set<unsigned> sms_of(CUcontext ctx, CUstream stream, CUfunction f, unsigned sms) {
  // One block per SM slot, each just long enough to be resident with the others: the SMs the
  // partition lets the kernel use.
  std::set<unsigned> used;
  unsigned* d;
  unsigned long long* span;
  CHECK(cudaMalloc(&d, sizeof(unsigned) * sms * 32));
  CHECK(cudaMalloc(&span, 2 * sizeof(unsigned long long)));
  CU_CHECK(cuCtxSetCurrent(ctx));
  unsigned long long spin = 20000;
  void* args[] = {&d, &spin, &span};
  CU_CHECK(cuLaunchKernel(f, sms * 32, 1, 1, 32, 1, 1, 0, stream, args, nullptr));
  CU_CHECK(cuStreamSynchronize(stream));
  std::vector<unsigned> h(sms * 32);
  CHECK(cudaMemcpy(h.data(), d, h.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  used.insert(h.begin(), h.end());
  CHECK(cudaFree(d));
  CHECK(cudaFree(span));
  return used;
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
  for (int i = 0; i < 2; ++i) part[i] = sms_of(green[i], gstream[i], f, (unsigned)sms);
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
    unsigned* d;
    unsigned long long* span;
    const unsigned grid = per_sm * (unsigned)sms;
    CHECK(cudaMalloc(&d, sizeof(unsigned) * grid));
    CHECK(cudaMalloc(&span, 2 * sizeof(unsigned long long)));
    std::vector<double> ms;
    std::set<unsigned> used;
    for (int i = 0; i < launches; ++i) {
      unsigned long long init[2] = {~0ull, 0};
      CU_CHECK(cuCtxSetCurrent(primary));
      CHECK(cudaMemcpy(span, init, sizeof init, cudaMemcpyHostToDevice));
      CU_CHECK(cuCtxSetCurrent(green[k]));
      unsigned long long spin = spin_ns;
      void* args[] = {&d, &spin, &span};
      CU_CHECK(cuLaunchKernel(f, grid, 1, 1, threads, 1, 1, 0, gstream[k], args, nullptr));
      CU_CHECK(cuStreamSynchronize(gstream[k]));
      CU_CHECK(cuCtxSetCurrent(primary));
      unsigned long long t[2];
      std::vector<unsigned> h(grid);
      CHECK(cudaMemcpy(t, span, sizeof t, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(h.data(), d, h.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
      used.insert(h.begin(), h.end());
      ms.push_back((t[1] - t[0]) / 1e6);
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
  auto run = [&](std::vector<Launch> launches) {
    for (auto& l : launches) {
      CHECK(cudaMalloc(&l.smids, sizeof(unsigned) * l.grid));
      CHECK(cudaMalloc(&l.span, 2 * sizeof(unsigned long long)));
      unsigned long long init[2] = {~0ull, 0};
      CHECK(cudaMemcpy(l.span, init, sizeof init, cudaMemcpyHostToDevice));
    }
    for (auto& l : launches) {
      CU_CHECK(cuCtxSetCurrent(l.ctx));
      unsigned long long spin = spin_ns;
      void* args[] = {&l.smids, &spin, &l.span};
      CU_CHECK(cuLaunchKernel(f, l.grid, 1, 1, threads, 1, 1, 0, l.stream, args, nullptr));
    }
    for (auto& l : launches) CU_CHECK(cuStreamSynchronize(l.stream));
    CU_CHECK(cuCtxSetCurrent(primary));
    unsigned long long first = ~0ull, last = 0;
    for (auto& l : launches) {
      std::vector<unsigned> h(l.grid);
      unsigned long long span[2];
      CHECK(cudaMemcpy(h.data(), l.smids, h.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(span, l.span, sizeof span, cudaMemcpyDeviceToHost));
      std::set<unsigned> used(h.begin(), h.end());
      unsigned outside = 0;
      for (unsigned s : used) outside += !l.allowed.empty() && !l.allowed.count(s);
      printf("  %-34s grid %5u: SMs used %3zu [%3u, %3u], outside its partition %u, %.3f ms\n",
             l.label, l.grid, used.size(), *used.begin(), *used.rbegin(), outside,
             (span[1] - span[0]) / 1e6);
      first = std::min(first, span[0]);
      last = std::max(last, span[1]);
      CHECK(cudaFree(l.smids));
      CHECK(cudaFree(l.span));
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
