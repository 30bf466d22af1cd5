// A unit whose kernels read immutable tables (`static const __device__`, `__constant__ const`,
// `constexpr __device__`), in the shape of a quantization library's lookup tables in a header:
// the compiler launcher copies them into the wrappers' module of their own and splits the
// unit (docs/build.md). The program checks every output against the host's computation from
// the same values, over many launches (scripts/gpu-check.sh runs it with every launch
// preemptible and under chaos mode). Prints `immutable_tables: N launches, M wrong`.
#include <cstdio>
#include <cstdlib>
#include <vector>

#define GAINS 0.5f, 1.25f, -2.0f, 3.5f, 0.125f, -0.75f, 1.0f, 2.25f
#define STEPS 3u, 5u, 7u, 11u

static const __device__ float kGain[8] = {GAINS};
__constant__ const unsigned kStep[4] = {STEPS};
constexpr __device__ int kBias = 17;

static const float host_gain[8] = {GAINS};
static const unsigned host_step[4] = {STEPS};
constexpr int host_bias = 17;

__global__ void dequantize(const unsigned char* q, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = kGain[(q[i] + blockIdx.x) % 8] * (float)(q[i] + kBias);
}

__global__ void strided(unsigned* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * kStep[blockIdx.x % 4] + kBias;
}

int main() {
  const int n = 1 << 20, threads = 128, launches = 40;
  std::vector<unsigned char> q(n);
  srand(2026);
  for (auto& v : q) v = (unsigned char)(rand() & 0xff);
  unsigned char* dq;
  float* dout;
  unsigned* dstr;
  cudaMalloc(&dq, n);
  cudaMalloc(&dout, n * sizeof(float));
  cudaMalloc(&dstr, n * sizeof(unsigned));
  cudaMemcpy(dq, q.data(), n, cudaMemcpyHostToDevice);
  std::vector<float> out(n);
  std::vector<unsigned> str(n);
  long wrong = 0;
  for (int l = 0; l < launches; ++l) {
    cudaMemset(dout, 0xcd, n * sizeof(float));
    cudaMemset(dstr, 0xcd, n * sizeof(unsigned));
    dequantize<<<n / threads, threads>>>(dq, dout, n);
    strided<<<n / threads, threads>>>(dstr, n);
    cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(str.data(), dstr, n * sizeof(unsigned), cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; ++i) {
      const int block = i / threads;
      const float want = host_gain[(q[i] + block) % 8] * (float)(q[i] + host_bias);
      if (out[i] != want) ++wrong;
      if (str[i] != (unsigned)(i * host_step[block % 4] + host_bias)) ++wrong;
    }
  }
  const cudaError_t e = cudaDeviceSynchronize();
  printf("immutable_tables: %d launches, %ld wrong%s%s\n", 2 * launches, wrong,
         e == cudaSuccess ? "" : ", ", e == cudaSuccess ? "" : cudaGetErrorString(e));
  return wrong == 0 && e == cudaSuccess ? 0 : 1;
}
