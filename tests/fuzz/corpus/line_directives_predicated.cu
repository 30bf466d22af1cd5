// A thread-dependent return that reaches a barrier: the original relies on exited threads not
// being waited for. The transformed kernel is predicated: returned threads skip the work but pass the barrier.
// EXPECT: stencil_tail transformed predicated
// GPU-TEST: stencil_tail<<<dim3(4000), dim3(128)>>>(in:f32[511000], out:f32[511000], i32:511000)
__global__ void stencil_tail(const float* in, float* out, int n) {
  __shared__ float s[130];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  s[threadIdx.x + 1] = in[i];
  if (threadIdx.x == 0) s[0] = i > 0 ? in[i - 1] : 0.0f;
  if (threadIdx.x == blockDim.x - 1 || i == n - 1) s[threadIdx.x + 2] = i + 1 < n ? in[i + 1] : 0.0f;
  __syncthreads();
  out[i] = 0.25f * s[threadIdx.x] + 0.5f * s[threadIdx.x + 1] + 0.25f * s[threadIdx.x + 2];
}
