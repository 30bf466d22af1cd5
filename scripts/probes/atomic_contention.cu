// Probe: what thousands of blocks pay when one thread per block hits shared counters with
// atomics, as the persistent task loop does (claims, retirements, lanes). Each of B blocks'
// leaders does R atomicAdds (64-bit, with or without using the answer) on counter
// (block % K) of K counters placed STRIDE bytes apart; prints the kernel time per atomic.
// Same address (K = 1), one 128-byte line shared by K words (stride 8), K lines (stride 128).
// Build and run on a GPU machine:
//   nvcc -arch=sm_90 -O3 -o /tmp/atomic_contention scripts/probes/atomic_contention.cu && /tmp/atomic_contention
#include <cstdio>
#include <cuda_runtime.h>

__global__ void claims(unsigned long long* base, unsigned k, unsigned stride_words, int reps,
                       bool use_answer, unsigned long long* sink) {
  if (threadIdx.x) return;
  unsigned long long* c = base + (size_t)(blockIdx.x % k) * stride_words;
  unsigned long long acc = 0;
  for (int i = 0; i < reps; ++i) {
    if (use_answer)
      acc += atomicAdd(c, 1ull);  // the next claim waits for this answer
    else
      atomicAdd(c, 1ull);  // compiled to a reduction: nobody waits
  }
  if (acc == 42) *sink = acc;
}

int main() {
  unsigned long long *base, *sink;
  cudaMalloc(&base, 1 << 20);
  cudaMalloc(&sink, 8);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const int reps = 16;
  struct Case { unsigned k, stride; } cases[] = {{1, 16}, {8, 1}, {16, 1}, {8, 16}, {32, 16},
                                                  {128, 16}, {32, 4}, {132, 16}};
  for (unsigned blocks : {1056u, 4224u}) {
    for (bool answer : {true, false}) {
      for (auto cs : cases) {
        float best = 1e9f;
        for (int t = 0; t < 5; ++t) {
          cudaMemset(base, 0, 1 << 20);
          cudaEventRecord(a);
          claims<<<blocks, 64>>>(base, cs.k, cs.stride, reps, answer, sink);
          cudaEventRecord(b);
          cudaEventSynchronize(b);
          float ms;
          cudaEventElapsedTime(&ms, a, b);
          best = ms < best ? ms : best;
        }
        std::printf("blocks %5u %-9s counters %3u stride %4u B: %7.1f us, %6.2f ns per atomic\n",
                    blocks, answer ? "atomic" : "reduction", cs.k, cs.stride * 8, best * 1e3,
                    best * 1e6 / (blocks * (double)reps));
      }
    }
  }
  return cudaGetLastError() != cudaSuccess;
}
