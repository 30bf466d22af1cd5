// Kernels for tests/runtime_gpu.rs (the runtime's launch/preempt/resume API on the GPU).
// Transformed by the test itself, compiled to PTX and loaded through cupreempt_runtime::rt.

#include <cstddef>

// Each task spins for `spin_ns` (so a preemption lands in the middle of the kernel), counts its
// runs in the low 16 bits of runs[task] and adds the SM it ran on above them (the test of a
// launch kept off some SMs reads it), and writes a value that depends only on its block and
// thread indices.
extern "C" __global__ void spin_fill(unsigned* out, unsigned* runs, unsigned long long spin_ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < spin_ns);
  const unsigned task = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  if (threadIdx.x == 0) atomicAdd(&runs[task], 1u + (smid << 16));
  out[task * blockDim.x + threadIdx.x] = (task * 2654435761u) ^ (threadIdx.x * 40503u) ^ gridDim.y;
}

// The application's next piece of work on the same stream: copies what spin_fill wrote.
#pragma cupreempt skip
extern "C" __global__ void copy_words(const unsigned* src, unsigned* dst, unsigned n) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    dst[i] = src[i];
}

// spin_fill's wrapper as headers older than `cupreempt_launch.launch_version` built it: its
// first parameter ends before that field. The runtime must not launch it to overlap the kernel
// before it (such a task loop has no wait for that kernel); the scenario "older headers"
// checks that it does not, and that the launch still computes what spin_fill computes. (This
// task loop itself is the tree's, which waits: only the runtime's choice is tested.) Only in
// the transformed file, which includes cupreempt's headers: as written, the file compiles
// without them (tests/nvcc.rs).
#ifdef CUPREEMPT_LAUNCH_VERSION
struct alignas(8) cupreempt_launch_before_version {
  unsigned char bytes[offsetof(cupreempt_launch, launch_version)];
};

#pragma cupreempt skip
extern "C" __global__ void spin_fill_older_headers(cupreempt_launch_before_version older,
                                                   unsigned* out, unsigned* runs,
                                                   unsigned long long spin_ns) {
  cupreempt_launch l;
  memset(&l, 0, sizeof l);
  memcpy(&l, &older, sizeof older);
  cupreempt::run_tasks<cupreempt::TaskCtx, false>(l, 0, 0, [&](cupreempt::TaskCtx& cp) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < spin_ns);
    const unsigned task = cp.blockIdx.x + cp.gridDim.x * (cp.blockIdx.y + cp.gridDim.y * cp.blockIdx.z);
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (threadIdx.x == 0) atomicAdd(&runs[task], 1u + (smid << 16));
    out[task * blockDim.x + threadIdx.x] = (task * 2654435761u) ^ (threadIdx.x * 40503u) ^ cp.gridDim.y;
  });
}
#endif  // CUPREEMPT_LAUNCH_VERSION
