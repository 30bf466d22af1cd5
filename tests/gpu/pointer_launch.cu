// Launches through local variables that hold a kernel's address, in the shape of extension code
// that raises a kernel's dynamic shared memory limit before launching it (`auto kernel =
// &k<Traits>; cudaFuncSetAttribute(kernel, ...MaxDynamicSharedMemorySize, smem);
// kernel<<<grid, threads, smem, stream>>>(...)`). Such a launch goes through the kernel's launch
// type (docs/transformation.md, "Launch sites"): the block's 64 KB of dynamic shared memory is
// over the default limit of 48 KB, so the wrapper launches only if the runtime carries the
// raised limit over to it. That launch sits in a dispatch macro's statement argument
// (`BOOL_SWITCH(cond, kName, statements...)`, docs/transformation.md "Statements passed to a
// macro"), which instantiates the kernel for both values. A pointer chosen at run time
// launches through `cupreempt::launch_any`, which finds the kernel by its address.
// The program checks every output on the host (scripts/gpu-check.sh runs it with every launch
// preemptible and under chaos mode); values are integers and halves below 2^24, exact either
// way. Prints `pointer_launch: N launches, M wrong`.
#include <cstdio>
#include <cstdlib>
#include <vector>

#define BOOL_SWITCH(COND, NAME, ...) \
  if (COND) {                        \
    constexpr bool NAME = true;      \
    __VA_ARGS__                      \
  } else {                           \
    constexpr bool NAME = false;     \
    __VA_ARGS__                      \
  }

// Each block stages its window of `Threads * PerThread` values in dynamic shared memory and
// writes it back reversed, scaled, plus a mark of its block where `Marked`.
template <typename T, int Threads, int PerThread, bool Marked>
__global__ void window_reverse(const T* in, T* out, T a) {
  extern __shared__ unsigned char raw[];
  T* window = reinterpret_cast<T*>(raw);
  constexpr int size = Threads * PerThread;
  const size_t base = (size_t)blockIdx.x * size;
  for (int j = threadIdx.x; j < size; j += Threads) window[j] = in[base + j];
  __syncthreads();
  for (int j = threadIdx.x; j < size; j += Threads) {
    out[base + j] = window[size - 1 - j] * a + (Marked ? T(blockIdx.x % 5) : T(0));
  }
}

__global__ void add_block(float* out, float b) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = out[i] + b + (float)(blockIdx.x % 3);
}

constexpr int kThreads = 256, kPerThread = 64, kWindow = kThreads * kPerThread;

void reverse_windows(const float* in, float* out, float a, bool marked, int windows,
                     cudaStream_t stream) {
  const size_t smem = kWindow * sizeof(float);  // 64 KB
  BOOL_SWITCH(marked, kMarked,
    auto kernel = &window_reverse<float, kThreads, kPerThread, kMarked>;
    if (smem > 48 * 1024) {
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    }
    kernel<<<windows, kThreads, smem, stream>>>(in, out, a););
}

void add_blocks(float* out, int n, float b, bool twice) {
  void (*plain)(float*, float) = add_block;
  plain<<<n / 256, 256>>>(out, b);
  // Chosen at run time: found by its address.
  auto chosen = twice ? &add_block : plain;
  chosen<<<n / 256, 256>>>(out, b);
}

int main() {
  const int windows = 1024, n = windows * kWindow, launches = 40;
  std::vector<float> x(n);
  srand(2026);
  for (int i = 0; i < n; ++i) x[i] = (float)(rand() % 1000);
  float *dx, *dy;
  cudaMalloc(&dx, n * sizeof(float));
  cudaMalloc(&dy, n * sizeof(float));
  cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  std::vector<float> got(n);
  long wrong = 0;
  for (int l = 0; l < launches; ++l) {
    const float a = 0.5f + (float)(l % 4), b = (float)l;
    cudaMemsetAsync(dy, 0xcd, n * sizeof(float), stream);
    const bool marked = l % 3 != 0;
    reverse_windows(dx, dy, a, marked, windows, stream);
    cudaStreamSynchronize(stream);
    add_blocks(dy, n, b, l % 2 == 0);
    cudaMemcpy(got.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; ++i) {
      const int w = i / kWindow, j = i % kWindow;
      const float reversed =
          x[(size_t)w * kWindow + kWindow - 1 - j] * a + (marked ? (float)(w % 5) : 0.0f);
      const float mark = b + (float)((i / 256) % 3);
      if (got[i] != reversed + 2.0f * mark) ++wrong;
    }
  }
  const cudaError_t e = cudaDeviceSynchronize();
  printf("pointer_launch: %d launches, %ld wrong%s%s\n", 3 * launches, wrong,
         e == cudaSuccess ? "" : ", ", e == cudaSuccess ? "" : cudaGetErrorString(e));
  return wrong == 0 && e == cudaSuccess ? 0 : 1;
}
