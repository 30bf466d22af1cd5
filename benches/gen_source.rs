// The benchmark's generated CUDA source (shared by benches/transform.rs and examples/).

/// Deterministic source of about `lines` lines.
pub fn generate(lines: usize) -> String {
    let mut s = String::from("#include <cuda_runtime.h>\n#include <cooperative_groups.h>\n#define IDX (blockIdx.x * blockDim.x + threadIdx.x)\n\n");
    let mut i = 0;
    while s.lines().count() < lines {
        s.push_str(&format!(
            r#"__device__ float helper_{i}(const float* v, int n) {{
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  return j < n ? v[j] * {i}.5f : 0.0f;
}}

template <typename T, int N>
__global__ void __launch_bounds__(256) scale_{i}(const T* __restrict__ in, T* out, int n) {{
  int k = IDX;
  if (k < n) out[k] = in[k] * T(N) + helper_{i}((const float*)in, n);
}}

__global__ void tile_{i}(float* out, const float* in, int w, int h) {{
  __shared__ float tile[32][33];
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  if (x < w && y < h) tile[threadIdx.y][threadIdx.x] = in[y * w + x];
  __syncthreads();
  x = blockIdx.y * 32 + threadIdx.x;
  y = blockIdx.x * 32 + threadIdx.y;
  if (x < h && y < w) out[y * h + x] = tile[threadIdx.x][threadIdx.y];
}}

__global__ void hazard_{i}(const int* in, int* out, int n) {{
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n) return;
  int c = __syncthreads_count(in[k] > 0);
  if (threadIdx.x == 0) out[blockIdx.x] = c;
}}

__global__ void refused_{i}(float* v) {{
  cooperative_groups::this_grid().sync();
  v[threadIdx.x] = 0;
}}

void launch_{i}(const float* a, float* b, int n, cudaStream_t s) {{
  scale_{i}<float, 2><<<(n + 255) / 256, 256, 0, s>>>(a, b, n);
  tile_{i}<<<dim3(8, 8), dim3(32, 32)>>>(b, a, 256, 256);
  hazard_{i}<<<(n + 127) / 128, 128, 0, s>>>((const int*)a, (int*)b, n);
}}

"#
        ));
        i += 1;
    }
    s
}
