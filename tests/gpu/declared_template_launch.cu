// Launches of a kernel template that this file only declares (defined and explicitly
// instantiated in declared_template.cu; built with `-static-global-template-stub=false`, which
// CUDA 13 needs for a template kernel of another unit): transformed, the launches go through
// weak declarations of the wrapper templates (`rewrite/declared.rs`), which the defining
// unit's transformed instantiations define. Outputs are checked; the run says how many
// launches were preemptible.
#include <cstdio>
#include <cuda_runtime.h>

#define FILL 0
#define RAMP 1

template <typename T, int FUNC> __global__ void kfunc(T* out, T value, long n);

int main() {
  const long n = 1 << 20;
  float* f;
  int* k;
  cudaMalloc(&f, n * sizeof(float));
  cudaMalloc(&k, n * sizeof(int));
  static float hf[1 << 20];
  static int hk[1 << 20];
  int bad = 0;
  for (int round = 0; round < 20; ++round) {
    cudaMemset(f, 0xff, n * sizeof(float));
    cudaMemset(k, 0xff, n * sizeof(int));
    if (round % 2 == 0) {
      kfunc<float, FILL><<<(n + 255) / 256, 256>>>(f, 2.5f + round, n);
    } else {
      kfunc<float, RAMP><<<(n + 127) / 128, 128>>>(f, (float)round, n);
    }
    kfunc<int, RAMP><<<dim3((unsigned)((n + 511) / 512)), 512>>>(k, round, n);
    cudaMemcpy(hf, f, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(hk, k, n * sizeof(int), cudaMemcpyDeviceToHost);
    for (long i = 0; i < n; ++i) {
      const float want = round % 2 == 0 ? 2.5f + round : (float)(i % 1000) + (float)round;
      bad += hf[i] != want;
      bad += hk[i] != (int)(i % 1000) + round;
    }
  }
  std::printf("declared_template: %s, %d wrong elements\n", cudaGetErrorString(cudaGetLastError()), bad);
  return bad == 0 ? 0 : 1;
}
