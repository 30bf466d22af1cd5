// Driver for scripts/probes/dwt_check.sh: runs a 2-D wavelet library's four public transforms
// (`dwt_cuda::fdwt53`, `rdwt53`, `fdwt97`, `rdwt97`, as Rodinia's and Altis' dwt2d declare them
// in dwt_cuda/dwt.h) on random images of a few sizes and levels, and prints a hash of every
// output buffer. Built once against the library as written and once transformed: the hashes
// must agree. Output buffers are poisoned before each call.
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <cuda_runtime.h>
#include "dwt.h"

// Altis' copy adds two flags to its forward 5/3 transform (`verbose`, `quiet`): -DDWT_ALTIS.
#ifdef DWT_ALTIS
#define FDWT53_FLAGS , false, true
#else
#define FDWT53_FLAGS
#endif

template <class T>
static unsigned long long hash_of(const T* dev, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost);
  unsigned long long x = 1469598103934665603ull;
  const unsigned char* b = (const unsigned char*)h.data();
  for (size_t i = 0; i < n * sizeof(T); ++i) x = (x ^ b[i]) * 1099511628211ull;
  return x;
}

int main() {
  std::mt19937 rng(11);
  const int sizes[][2] = {{1024, 1024}, {1000, 700}, {4096, 2048}};
  for (auto& s : sizes) {
    const int w = s[0], h = s[1], n = w * h;
    for (int levels = 1; levels <= 3; ++levels) {
      std::vector<int> ii(n);
      std::vector<float> fi(n);
      for (int i = 0; i < n; ++i) {
        ii[i] = (int)(rng() % 511) - 255;
        fi[i] = (float)ii[i] / 7.0f;
      }
      int *din, *dout;
      float *fin, *fout;
      cudaMalloc(&din, n * sizeof(int));
      cudaMalloc(&dout, n * sizeof(int));
      cudaMalloc(&fin, n * sizeof(float));
      cudaMalloc(&fout, n * sizeof(float));
      unsigned long long hs[4];
      cudaMemcpy(din, ii.data(), n * sizeof(int), cudaMemcpyHostToDevice);
      cudaMemset(dout, 0xcd, n * sizeof(int));
      dwt_cuda::fdwt53(din, dout, w, h, levels FDWT53_FLAGS);
      hs[0] = hash_of(dout, n);
      cudaMemset(din, 0xcd, n * sizeof(int));
      dwt_cuda::rdwt53(dout, din, w, h, levels);
      hs[1] = hash_of(din, n);
      cudaMemcpy(fin, fi.data(), n * sizeof(float), cudaMemcpyHostToDevice);
      cudaMemset(fout, 0xcd, n * sizeof(float));
      dwt_cuda::fdwt97(fin, fout, w, h, levels);
      hs[2] = hash_of(fout, n);
      cudaMemset(fin, 0xcd, n * sizeof(float));
      dwt_cuda::rdwt97(fout, fin, w, h, levels);
      hs[3] = hash_of(fin, n);
      printf("%dx%d levels %d: %016llx %016llx %016llx %016llx %s\n", w, h, levels, hs[0], hs[1],
             hs[2], hs[3], cudaGetErrorString(cudaDeviceSynchronize()));
      cudaFree(din);
      cudaFree(dout);
      cudaFree(fin);
      cudaFree(fout);
    }
  }
  return 0;
}
