// Probe: where the hardware places the blocks of persistent kernels that may each use only a
// set of SMs, with no cupreempt code involved (the shares experiment's loss, docs/daemon.md,
// "Measured: the shares experiment"). One process launches a persistent kernel back to back for
// SECONDS: GRID blocks of 256 threads, each block looks at %smid; one on an SM outside [LO, HI)
// leaves at once (as a block of a kernel preempted on that SM does), the others take tasks of
// TASK_US microseconds (a spin on %globaltimer) from an atomic counter until TASKS are done.
// Two such processes side by side under MPS with disjoint SM ranges are the shares experiment's
// SM shares without the runtime or the daemon. scripts/probes/sm_placement.sh runs the cases.
// Build: nvcc -arch=sm_90 -O3 scripts/probes/sm_placement.cu -o sm_placement
// Usage: sm_placement LO HI SECONDS GRID [TASKS [TASK_US]]   (HI `all`: every SM)
//   GRID: a number of blocks, or `full` (8 per SM of the whole GPU) or `own` (8 per SM of
//   [LO, HI)). Prints the launches made, their median time, and per launch (means): the SMs
//   that ran a task, blocks that started on [LO, HI) and left elsewhere, and the most blocks
//   in the task loop at once on one SM of [LO, HI) (mean over those SMs).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe.cuh"

constexpr int kMaxSms = 256;
struct Counters {
  unsigned long long next_task;
  unsigned started[kMaxSms];  // blocks that entered the loop on this SM
  unsigned left[kMaxSms];     // blocks that left at once (SM outside the range)
  unsigned tasks[kMaxSms];
  unsigned in_loop[kMaxSms];  // blocks in the loop now
  unsigned most[kMaxSms];     // the most at once
};

__device__ unsigned smid() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__global__ void persistent(Counters* c, unsigned lo, unsigned hi, unsigned long long tasks,
                           unsigned task_ns, float* sink) {
  __shared__ unsigned long long task;
  const unsigned sm = smid();
  if (sm < lo || sm >= hi) {
    if (threadIdx.x == 0) atomicAdd(&c->left[sm], 1u);
    return;
  }
  if (threadIdx.x == 0) {
    atomicAdd(&c->started[sm], 1u);
    atomicMax(&c->most[sm], atomicAdd(&c->in_loop[sm], 1u) + 1);
  }
  float acc = threadIdx.x;
  for (;;) {
    if (threadIdx.x == 0) task = atomicAdd(&c->next_task, 1ull);
    __syncthreads();
    const unsigned long long t = task;
    __syncthreads();
    if (t >= tasks) break;
    const unsigned long long end = now_ns() + task_ns;
    while (now_ns() < end) acc = acc * 0.999f + 1.0f;
    if (threadIdx.x == 0) atomicAdd(&c->tasks[sm], 1u);
  }
  if (threadIdx.x == 0) atomicSub(&c->in_loop[sm], 1u);
  if (acc == -1.0f) *sink = acc;  // never: keeps the spin
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s LO HI SECONDS GRID [TASKS [TASK_US]]\n", argv[0]);
    return 2;
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const unsigned lo = atoi(argv[1]), hi = !strcmp(argv[2], "all") ? sms : atoi(argv[2]);
  const double seconds = atof(argv[3]);
  unsigned grid = !strcmp(argv[4], "full")  ? 8u * sms
                  : !strcmp(argv[4], "own") ? 8u * (hi - lo)
                                            : (unsigned)atoi(argv[4]);
  const unsigned long long tasks = argc > 5 ? atoll(argv[5]) : 200ull * 8 * sms;
  const unsigned task_ns = (argc > 6 ? atoi(argv[6]) : 100) * 1000u;
  Counters* c;
  float* sink;
  CHECK(cudaMalloc(&c, sizeof(Counters)));
  CHECK(cudaMalloc(&sink, sizeof(float)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<Counters> per;
  std::vector<double> ms;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    CHECK(cudaMemsetAsync(c, 0, sizeof(Counters), s));
    const auto a = std::chrono::steady_clock::now();
    persistent<<<grid, 256, 0, s>>>(c, lo, hi, tasks, task_ns, sink);
    CHECK(cudaStreamSynchronize(s));
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
    per.emplace_back();
    CHECK(cudaMemcpy(&per.back(), c, sizeof(Counters), cudaMemcpyDeviceToHost));
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  double used = 0, started = 0, left = 0, most = 0;
  std::vector<double> tasks_per_sm(sms, 0.0);
  for (const Counters& k : per) {
    for (int i = 0; i < sms; ++i) {
      used += k.tasks[i] > 0;
      left += k.left[i];
      tasks_per_sm[i] += k.tasks[i];
      if (i >= (int)lo && i < (int)hi) started += k.started[i], most += k.most[i];
    }
  }
  const double n = per.size();
  printf("SMs [%u, %u) grid %u tasks %llu of %u us: %zu launches, median %.2f ms; per launch: "
         "%.1f SMs ran tasks, %.0f blocks started in range, %.0f left elsewhere, "
         "%.2f blocks at most at once per SM in range\n",
         lo, hi, grid, tasks, task_ns / 1000, per.size(), sorted[sorted.size() / 2], used / n,
         started / n, left / n, most / (n * (hi - lo)));
  // Tasks per SM (means per launch), in groups of 11 SMs.
  printf("tasks per SM:");
  for (int i = 0; i < sms; ++i) printf("%s%.0f", i % 11 ? " " : "\n  ", tasks_per_sm[i] / n);
  printf("\n");
  return 0;
}
