// Block helpers that synchronize, in a header that the kernels' unit includes
// (tests/gpu/header_sync_helpers.cu): the header's transform makes their live copies, which
// the unit's predicated kernels call after their bounds returns (transformation.md,
// "Synchronizing helpers").
#pragma once

// Each thread's element into the block's row of shared memory.
__device__ void stage_row(int* row, const int* in, int i) {
  row[threadIdx.x] = in[i];
  __syncthreads();
}

// The sum of the first `count` threads' values (a tree over `scratch`; the other slots are
// never read). Returns a value: returned threads get a value-initialized one.
template <int N>
__device__ int block_total(int* scratch, int v, int count) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int half = N / 2; half > 0; half >>= 1) {
    if ((int)threadIdx.x < half && (int)threadIdx.x + half < count)
      scratch[threadIdx.x] += scratch[threadIdx.x + half];
    __syncthreads();
  }
  return scratch[0];
}

// Reads the block index: its copy takes the task context, which the kernels pass.
__device__ int block_origin(int* slot) {
  if (threadIdx.x == 0) *slot = (int)blockIdx.x * 3;
  __syncthreads();
  return *slot;
}
