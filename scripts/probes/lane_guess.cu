// Probe: which blocks of a full persistent grid share an SM, and how often a first guess at a
// lane (claim_lane() in task_loop.cuh) collides with another block's guess on the same SM,
// which costs the colliding block a second atomic at its start. Each of B = PER * SMs blocks
// (PER blocks per SM, 2048 / PER threads each) records %smid and the %warpid of its warp 0 (the
// warp slot on its SM), then waits until every block has arrived, so that all of them are
// resident at once, as a persistent grid's are (every shape fits the GPU at once); per grid
// shape the probe prints, for each candidate guess, how many blocks share their guess with an
// earlier block of the same SM, and the blocks of SM 0 with their warp slots. Guesses:
// blockIdx.x % 32, (blockIdx.x / SMs) % 32, warpid % 32, (warpid / warps per block) % 32 and
// (warpid / 2) % 32.
// Build and run on a GPU machine:
//   nvcc -arch=sm_90 -O3 -o /tmp/lane_guess scripts/probes/lane_guess.cu && /tmp/lane_guess
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__global__ void record_sm(unsigned* sm, unsigned* warp, unsigned* arrived) {
  __shared__ unsigned seen[1024];
  unsigned id, w;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  asm volatile("mov.u32 %0, %%warpid;" : "=r"(w));
  seen[threadIdx.x] = id;  // some shared memory, as a wrapper's block holds
  __syncthreads();
  if (threadIdx.x == 0) {
    sm[blockIdx.x] = seen[blockDim.x - 1], warp[blockIdx.x] = w;
    atomicAdd(arrived, 1u);
    while (*(volatile unsigned*)arrived < gridDim.x) {
    }
  }
  __syncthreads();
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const char* names[5] = {"b%32", "(b/SMs)%32", "warpid%32", "(warpid/wpb)%32", "(warpid/2)%32"};
  for (int per : {8, 4, 2, 16, 32}) {
    const int blocks = per * sms, threads = 2048 / per, wpb = threads / 32;
    unsigned *d = nullptr, *dw = nullptr, *arrived = nullptr;
    if (cudaMalloc(&d, blocks * sizeof(unsigned)) != cudaSuccess ||
        cudaMalloc(&dw, blocks * sizeof(unsigned)) != cudaSuccess ||
        cudaMalloc(&arrived, sizeof(unsigned)) != cudaSuccess)
      return 1;
    std::vector<unsigned> h(blocks), hw(blocks);
    for (int rep = 0; rep < 3; ++rep) {
      cudaMemset(arrived, 0, sizeof(unsigned));
      record_sm<<<blocks, threads>>>(d, dw, arrived);
      if (cudaMemcpy(h.data(), d, blocks * sizeof(unsigned), cudaMemcpyDeviceToHost) !=
              cudaSuccess ||
          cudaMemcpy(hw.data(), dw, blocks * sizeof(unsigned), cudaMemcpyDeviceToHost) !=
              cudaSuccess)
        return 1;
      std::printf("%d blocks per SM of %d threads, %d blocks, run %d:", per, threads, blocks, rep);
      for (int g = 0; g < 5; ++g) {
        std::vector<unsigned> held(1024, 0);  // per SM id: lanes guessed so far
        int collisions = 0;
        for (int b = 0; b < blocks; ++b) {
          const unsigned guess = g == 0   ? b % 32
                                 : g == 1 ? (b / sms) % 32
                                 : g == 2 ? hw[b] % 32
                                 : g == 3 ? (hw[b] / wpb) % 32
                                          : (hw[b] / 2) % 32;
          unsigned& lanes = held[h[b] % 1024];
          if (lanes & (1u << guess)) ++collisions;
          lanes |= 1u << guess;
        }
        std::printf("  %s: %d", names[g], collisions);
      }
      std::printf("\n  blocks on SM %u (block:warpid):", h[0]);
      for (int b = 0; b < blocks; ++b)
        if (h[b] == h[0]) std::printf(" %d:%u", b, hw[b]);
      std::printf("\n");
    }
    cudaFree(d);
    cudaFree(dw);
    cudaFree(arrived);
  }
  return 0;
}
