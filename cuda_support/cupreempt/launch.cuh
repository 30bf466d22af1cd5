// cupreempt host side: what a rewritten launch site calls.
//
//   k<<<grid, block, smem, stream>>>(args...)
// becomes
//   cupreempt::launch<k__cupreempt_kernels>(grid, block, smem, stream, args...)
//
// `Kernels` names the original kernel (Kernels::original) and its persistent wrapper
// (Kernels::wrapper). The launch stays asynchronous and on the caller's stream; launch errors are
// left for cudaGetLastError() exactly as the original launch leaves them.
//
// Without the runtime (no scheduler attached) each launch gets its own control block from the
// stream-ordered allocator and runs to completion, so the program behaves like the original.
#pragma once
#include <cuda_runtime.h>
#include <cstdlib>
#include <utility>
#include "control.h"

namespace cupreempt {

namespace detail {
inline unsigned env_u32(const char* name) {
  const char* v = std::getenv(name);
  return v ? (unsigned)std::strtoul(v, nullptr, 10) : 0u;
}
}  // namespace detail

// Blocks of `wrapper` that fit on the device at once, or 0 when that cannot be known (then the
// caller launches the original grid, which reports any configuration error as the original).
template <class... P>
unsigned persistent_blocks(void (*wrapper)(cupreempt_launch, P...), unsigned block_threads,
                           size_t smem) {
  int device = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, wrapper, (int)block_threads, smem) !=
          cudaSuccess) {
    (void)cudaGetLastError();  // our query's error is not the program's
    return 0;
  }
  return (unsigned)(per_sm * sms);
}

template <class Kernels, class... Args>
void launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  const auto wrapper = Kernels::wrapper;
  // A program that raised the original's dynamic shared-memory limit expects the launch to work.
  if (smem > 48 * 1024) {
    cudaFuncAttributes attr;
    if (cudaFuncGetAttributes(&attr, Kernels::original) == cudaSuccess)
      (void)cudaFuncSetAttribute(wrapper, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 attr.maxDynamicSharedSizeBytes);
    (void)cudaGetLastError();
  }
  const unsigned long long tasks = (unsigned long long)grid.x * grid.y * grid.z;
  const unsigned threads = block.x * block.y * block.z;
  unsigned blocks = tasks ? persistent_blocks(wrapper, threads, smem) : 0;
  if (blocks == 0 || blocks > tasks) blocks = (unsigned)(tasks < 0xffffffffull ? tasks : 0xffffffffull);

  cupreempt_control* control = nullptr;
  if (cudaMallocAsync((void**)&control, sizeof(cupreempt_control), stream) != cudaSuccess ||
      cudaMemsetAsync(control, 0, sizeof(cupreempt_control), stream) != cudaSuccess) {
    return;  // the failing call left its error for cudaGetLastError()
  }
  static const unsigned chunk = detail::env_u32("CUPREEMPT_CHUNK");
  static const unsigned budget_ns = detail::env_u32("CUPREEMPT_BUDGET_NS");
  const cupreempt_launch l = {control, tasks, grid.x, grid.y, grid.z, chunk, budget_ns, nullptr};
  // An empty or invalid original grid is launched as is, so the error is the original's.
  const dim3 persistent = tasks && blocks ? dim3(blocks) : grid;
  wrapper<<<persistent, block, smem, stream>>>(l, std::forward<Args>(args)...);
  // A failed launch keeps its error for cudaGetLastError(); a successful call does not clear it.
  (void)cudaFreeAsync(control, stream);
}

}  // namespace cupreempt
