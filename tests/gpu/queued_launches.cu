// Thousands of short launches queued on one stream faster than the GPU runs them, as iterative
// programs do (HeCBench's lud: 1,534 launches in 0.6 s). scripts/gpu-check.sh runs it as written
// and under CUPREEMPT_CHAOS: the driver's command queue fills behind whichever launch chaos has
// preempted, and the program must still finish, with the same output.
//
// Each launch advances every element of an 8M-element array (32 MB: tens of µs per launch, more
// than the host needs to queue one) by one step of a linear
// congruential recurrence (exact in integers, so any order of blocks gives the same bits);
// the program prints a hash of the whole array and checks 1,024 sampled elements against the
// host. Exit status 0 only if every sample matches.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <vector>

constexpr unsigned kA = 1664525u, kB = 1013904223u;

__global__ void advance(unsigned* x, unsigned n, unsigned step) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * kA + kB + step;
}

int main(int argc, char** argv) {
  const unsigned n = 1u << 23, steps = argc > 1 ? (unsigned)atoi(argv[1]) : 4000;
  std::vector<unsigned> host(n);
  for (unsigned i = 0; i < n; ++i) host[i] = i * 2654435761u;
  unsigned* x = nullptr;
  if (cudaMalloc(&x, n * sizeof(unsigned)) != cudaSuccess) return 1;
  cudaMemcpy(x, host.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice);
  // Queued without a synchronization in between: the host runs far ahead of the GPU.
  for (unsigned s = 0; s < steps; ++s) advance<<<n / 256, 256>>>(x, n, s);
  std::vector<unsigned> out(n);
  if (cudaMemcpy(out.data(), x, n * sizeof(unsigned), cudaMemcpyDeviceToHost) != cudaSuccess) {
    std::printf("error: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  unsigned long long hash = 1469598103934665603ull;
  for (unsigned v : out) hash = (hash ^ v) * 1099511628211ull;
  unsigned wrong = 0;
  for (unsigned k = 0; k < 1024; ++k) {
    const unsigned i = (k * 4099u + 7u) % n;
    unsigned v = host[i];
    for (unsigned s = 0; s < steps; ++s) v = v * kA + kB + s;
    wrong += v != out[i];
  }
  std::printf("queued_launches: %u launches, hash %016llx, %u of 1024 samples wrong\n", steps, hash,
              wrong);
  cudaFree(x);
  return wrong != 0;
}
