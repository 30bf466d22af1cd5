// Probe: which blocks of a full persistent grid share an SM, and how often the task loop's first
// guess at a lane (claim_lane() in task_loop.cuh: blockIdx.x % 32) collides with another
// block's on the same SM, which costs the colliding block a second atomic at its start. Each
// of B = PER * SMs blocks (256 threads, PER blocks per SM) records %smid; per grid shape the
// probe prints, for three candidate guesses, how many blocks share their guess with an earlier
// block of the same SM (each such block retries at least once), and the blocks of SM 0.
// Guesses: blockIdx.x % 32 (the task loop's), (blockIdx.x / SMs) % 32, and
// (blockIdx.x / (SMs / 2)) % 32 (blocks handed out to SM pairs).
// Build and run on a GPU machine:
//   nvcc -arch=sm_90 -O3 -o /tmp/lane_guess scripts/probes/lane_guess.cu && /tmp/lane_guess
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__global__ void record_sm(unsigned* sm) {
  __shared__ unsigned seen[256];
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  seen[threadIdx.x] = id;  // some shared memory, as a wrapper's block holds
  __syncthreads();
  if (threadIdx.x == 0) sm[blockIdx.x] = seen[255];
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const char* names[3] = {"b % 32", "(b / SMs) % 32", "(b / (SMs/2)) % 32"};
  for (int per : {8, 4, 2}) {
    const int blocks = per * sms;
    unsigned* d = nullptr;
    if (cudaMalloc(&d, blocks * sizeof(unsigned)) != cudaSuccess) return 1;
    std::vector<unsigned> h(blocks);
    for (int rep = 0; rep < 3; ++rep) {
      record_sm<<<blocks, 256>>>(d);
      if (cudaMemcpy(h.data(), d, blocks * sizeof(unsigned), cudaMemcpyDeviceToHost) !=
          cudaSuccess)
        return 1;
      std::printf("%d blocks per SM, %d blocks, run %d:", per, blocks, rep);
      for (int g = 0; g < 3; ++g) {
        std::vector<unsigned> held(1024, 0);  // per SM id: lanes guessed so far
        int collisions = 0;
        for (int b = 0; b < blocks; ++b) {
          const unsigned guess = g == 0 ? b % 32 : g == 1 ? (b / sms) % 32 : (b / (sms / 2)) % 32;
          unsigned& lanes = held[h[b] % 1024];
          if (lanes & (1u << guess)) ++collisions;
          lanes |= 1u << guess;
        }
        std::printf("  %s: %d colliding", names[g], collisions);
      }
      std::printf("\n  blocks on SM %u:", h[0]);
      for (int b = 0; b < blocks; ++b)
        if (h[b] == h[0]) std::printf(" %d", b);
      std::printf("\n");
    }
    cudaFree(d);
  }
  return 0;
}
