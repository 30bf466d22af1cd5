// Kernels whose static shared memory fills the 48 KB a block may declare, so that the task
// loop keeps its state in dynamic shared memory (transformation.md, "Shared memory at the
// limit"): a tiled transpose template (48 KB of tiles), and a kernel with 48,952 bytes of
// static shared memory and up to 4,096 of its own dynamic shared memory, whose limit the
// program raises as a program must (48,952 + 4,096 is over 48 KB). Its launches ask for 1,024
// bytes first, then 4,096: the wrapper's limit, raised for the first, must be raised again.
// A kernel template whose count is its template argument chooses per instance
// (`shared_size::LoopState::PerInstance`): 12,288 words take the dynamic form, 1,024 the
// static one, whose wrappers go to the launcher's module. Beside them two ordinary kernels,
// whose wrappers the compiler launcher moves to a module of their own; the others stay in
// the unit's object. gpu-check transforms it (`cupreempt transform`, and the compiler launcher
// split), runs every launch preemptible, then under chaos mode. Exit status 0 when every
// element of every launch is right and, transformed, each launch type names the wrappers it
// should.
#include <cstdio>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

constexpr int kTile = 64;
constexpr int kRows = 3;  // tiles of kTile x kTile floats: 3 x 16 KB

// out[c][r] = in[r][c] + k, over kRows stacked tiles per block.
template <typename T>
__global__ void transpose_tiles(const T* in, T* out, int n, T k) {
  __shared__ float tile[kRows][kTile][kTile];  // a template parameter's type would count nothing
  const int bx = blockIdx.x * kTile, by = blockIdx.y * kTile * kRows;
  for (int r = threadIdx.y; r < kTile * kRows; r += blockDim.y)
    for (int c = threadIdx.x; c < kTile; c += blockDim.x) {
      const int row = by + r, col = bx + c;
      tile[r / kTile][r % kTile][c] = row < n && col < n ? (float)in[(size_t)row * n + col] : 0.0f;
    }
  __syncthreads();
  for (int r = threadIdx.y; r < kTile * kRows; r += blockDim.y)
    for (int c = threadIdx.x; c < kTile; c += blockDim.x) {
      const int row = bx + c, col = by + r;
      if (row < n && col < n) out[(size_t)row * n + col] = (T)tile[r / kTile][r % kTile][c] + k;
    }
}

constexpr int kWords = (48 * 1024 - 200) / 4;

// Static words and the launch's own dynamic words (`extra_words`): the loop's state goes past them.
__global__ void words_and_bytes(const unsigned* in, unsigned* out, int n, unsigned salt,
                                int extra_words) {
  __shared__ unsigned words[kWords];
  extern __shared__ unsigned extra[];
  for (int i = threadIdx.x; i < kWords; i += blockDim.x) words[i] = salt ^ (unsigned)(i * 40503u);
  for (int i = threadIdx.x; i < extra_words; i += blockDim.x) extra[i] = blockIdx.x + (unsigned)i;
  __syncthreads();
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g < n) out[g] = in[g] + words[(threadIdx.x * 7 + blockIdx.x) % kWords] + extra[(threadIdx.x * 3) % extra_words];
}

template <int Words>
__global__ void instance_words(const unsigned* in, unsigned* out, int n, unsigned salt) {
  __shared__ unsigned words[Words];
  for (int i = threadIdx.x; i < Words; i += blockDim.x) words[i] = salt ^ (unsigned)(i * 2246822519u);
  __syncthreads();
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g < n) out[g] = in[g] ^ words[(threadIdx.x * 11 + blockIdx.x) % Words] ^ words[Words - 1 - threadIdx.x];
}

__global__ void ordinary(const unsigned* in, unsigned* out, int n) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g < n) out[g] = in[g] * 3u + 1u;
}

__global__ void ordinary_add(unsigned* out, int n, unsigned k) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g < n) out[g] += k;
}

int main() {
  const int n = 1000, launches = 10;  // transpose: 16 x 6 blocks of tiles
  const int m = 600 * 256 - 17;        // words_and_bytes, ordinary: 600 blocks
  std::vector<float> a((size_t)n * n), at((size_t)n * n);
  std::vector<unsigned> u(m), got(m);
  for (size_t i = 0; i < a.size(); ++i) a[i] = (float)(i % 977);
  for (int i = 0; i < m; ++i) u[i] = (unsigned)i * 2654435761u;
  float *da, *dat;
  unsigned *du, *dv;
  cudaMalloc(&da, a.size() * sizeof(float));
  cudaMalloc(&dat, a.size() * sizeof(float));
  cudaMalloc(&du, m * sizeof(unsigned));
  cudaMalloc(&dv, m * sizeof(unsigned));
  cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(du, u.data(), m * sizeof(unsigned), cudaMemcpyHostToDevice);
  const size_t extra = 4096;
  cudaFuncSetAttribute(words_and_bytes, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)extra);
  long wrong = 0;
  for (int l = 0; l < launches; ++l) {
    const float k = (float)l;
    cudaMemset(dat, 0xcd, a.size() * sizeof(float));
    transpose_tiles<float><<<dim3((n + kTile - 1) / kTile, (n + kTile * kRows - 1) / (kTile * kRows)),
                             dim3(32, 8)>>>(da, dat, n, k);
    cudaMemcpy(at.data(), dat, at.size() * sizeof(float), cudaMemcpyDeviceToHost);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c)
        if (at[(size_t)c * n + r] != a[(size_t)r * n + c] + k) ++wrong;

    const unsigned salt = 0x9e3779b9u * (unsigned)(l + 1);
    cudaMemset(dv, 0xcd, m * sizeof(unsigned));
    const int extra_words = l < launches / 2 ? 256 : (int)(extra / 4);
    words_and_bytes<<<(m + 255) / 256, 256, extra_words * 4>>>(du, dv, m, salt, extra_words);
    cudaMemcpy(got.data(), dv, m * sizeof(unsigned), cudaMemcpyDeviceToHost);
    for (int g = 0; g < m; ++g) {
      const unsigned b = (unsigned)(g / 256), t = (unsigned)(g % 256);
      const unsigned w = salt ^ (unsigned)(((t * 7 + b) % kWords) * 40503u);
      if (got[g] != u[g] + w + b + (t * 3) % (unsigned)extra_words) ++wrong;
    }

    for (int big = 0; big < 2; ++big) {
      const int words = big ? 12288 : 1024;
      cudaMemset(dv, 0xcd, m * sizeof(unsigned));
      if (big)
        instance_words<12288><<<(m + 255) / 256, 256>>>(du, dv, m, salt);
      else
        instance_words<1024><<<(m + 255) / 256, 256>>>(du, dv, m, salt);
      cudaMemcpy(got.data(), dv, m * sizeof(unsigned), cudaMemcpyDeviceToHost);
      for (int g = 0; g < m; ++g) {
        const unsigned b = (unsigned)(g / 256), t = (unsigned)(g % 256);
        const unsigned w1 = salt ^ (unsigned)(((t * 11 + b) % (unsigned)words) * 2246822519u);
        const unsigned w2 = salt ^ (unsigned)((words - 1 - t) * 2246822519u);
        if (got[g] != (u[g] ^ w1 ^ w2)) ++wrong;
      }
    }

    cudaMemset(dv, 0xcd, m * sizeof(unsigned));
    ordinary<<<(m + 255) / 256, 256>>>(du, dv, m);
    ordinary_add<<<(m + 255) / 256, 256>>>(dv, m, (unsigned)l);
    cudaMemcpy(got.data(), dv, m * sizeof(unsigned), cudaMemcpyDeviceToHost);
    for (int g = 0; g < m; ++g)
      if (got[g] != u[g] * 3u + 1u + (unsigned)l) ++wrong;
  }
  const cudaError_t e = cudaDeviceSynchronize();
  bool names_ok = true;
// Transformed (cupreempt.cuh is included), and not the wrapper module of a split unit.
#if defined(CUPREEMPT_R32_BLOCKS_OF) && !defined(CUPREEMPT_WRAPPER_MODULE)
  names_ok = transpose_tiles__cupreempt_kernels<float>::wrapper == &transpose_tiles__cupreempt_dyn<float> &&
             words_and_bytes__cupreempt_kernels::wrapper == &words_and_bytes__cupreempt_dyn &&
             cupreempt::detail::loop_shared_bytes<words_and_bytes__cupreempt_kernels>::value ==
                 CUPREEMPT_LOOP_SHARED_BYTES &&
             cupreempt::detail::loop_shared_bytes<ordinary__cupreempt_kernels>::value == 0 &&
             instance_words__cupreempt_kernels<12288>::wrapper == &instance_words__cupreempt_dyn<12288> &&
             cupreempt::detail::loop_shared_bytes<instance_words__cupreempt_kernels<1024>>::value == 0;
#if defined(CUPREEMPT_SPLIT_UNIT)
  names_ok = names_ok && instance_words__cupreempt_kernels<1024>::wrapper == nullptr;  // the module's
#else
  names_ok = names_ok && instance_words__cupreempt_kernels<1024>::wrapper == &instance_words__cupreempt<1024>;
#endif
#endif
  printf("full_shared_kernels: %d launches of 5 kernels, %ld wrong, launch types %s%s%s\n",
         launches, wrong, names_ok ? "as expected" : "WRONG", e == cudaSuccess ? "" : ", ",
         e == cudaSuccess ? "" : cudaGetErrorString(e));
  return wrong == 0 && e == cudaSuccess && names_ok ? 0 : 1;
}
