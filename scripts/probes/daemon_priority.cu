// Probe for cupreemptd's priority experiment (docs/daemon.md; scripts/probes/daemon_priority.sh
// builds it transformed and runs it as two processes):
//   batch SECONDS   keeps the GPU busy with long kernels (about 20 ms each, blocks of about
//                   100 us) for SECONDS; prints the kernels finished (PROBE_ITERS=N: N
//                   iterations per block instead of calibrating)
//   urgent COUNT    COUNT times: waits 2-10 ms (random), launches a short kernel (about 0.1 ms
//                   alone) and waits for it; prints the turnaround's p50, p99 and mean in µs
//                   (PROBE_HIGH_PRIORITY=1: on a stream of the greatest priority)
//   calibrate US    prints the iterations for which one launch of the batch grid takes US alone
//   job ITERS AT    one launch of the batch grid with ITERS iterations, at AT (µs of the
//                   system's monotonic clock, so that processes started together launch at
//                   set times); prints its turnaround in µs (launch to end)
//   job-cold ITERS AT  the same, warmed with a one-block launch only: the timed launch is the
//                   first of its grid, and the runtime sets up while it runs (mps_exit.sh)
// Both launch `spin`, whose blocks run a chain of dependent multiply-adds.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

// A chain of `iters` dependent multiply-adds on v.
__device__ __forceinline__ float chain(float v, int iters) {
  for (int k = 0; k < iters; ++k) v = v * 1.0000001f + 1e-7f;
  return v;
}

__global__ void spin(float* p, int iters) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  p[i] = chain(p[i], iters);
}

// The same, also counting the blocks (tasks) that ran on each SM (PROBE_SM_LOG).
__global__ void spin_counted(float* p, int iters, unsigned* per_sm) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  p[i] = chain(p[i], iters);
  if (threadIdx.x == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    atomicAdd(&per_sm[sm % 1024], 1u);
  }
}

static double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

static int check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
  return 0;
}

// Iterations for a launch of `blocks` x 256 threads to take about `target_us` alone.
static int calibrate(float* p, int blocks, double target_us) {
  int iters = 1000;
  for (int round = 0; round < 6; ++round) {
    spin<<<blocks, 256>>>(p, iters);
    check(cudaDeviceSynchronize(), "calibration");
    const double t0 = now_us();
    spin<<<blocks, 256>>>(p, iters);
    check(cudaDeviceSynchronize(), "calibration");
    const double took = now_us() - t0;
    iters = std::max(1, (int)(iters * target_us / std::max(took, 1.0)));
  }
  return iters;
}

// SIGTERM ends a batch run after its current kernel: under MPS, a client killed while its
// kernel runs leaves the MPS server refusing the next clients for a while ("CUDA-capable
// device(s) is/are busy or unavailable"), which would spoil the next case of the experiment.
static volatile std::sig_atomic_t stop_batch = 0;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s batch SECONDS | urgent COUNT\n", argv[0]);
    return 2;
  }
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  // Batch: 1,600 blocks per SM, so that each block (a task of the persistent form, which
  // yields between tasks) runs about 100 us of the 20 ms kernel, as the blocks of a large
  // GEMM or stencil do; a few long blocks would make every preemption wait for them.
  const bool urgent = std::strcmp(argv[1], "urgent") == 0;
  const int blocks = urgent ? 64 : sms * 1600;
  float* p = nullptr;
  check(cudaMalloc(&p, (size_t)blocks * 256 * sizeof(float)), "cudaMalloc");
  check(cudaMemset(p, 0, (size_t)blocks * 256 * sizeof(float)), "cudaMemset");
  if (std::strcmp(argv[1], "batch") == 0) {
    // PROBE_ITERS: the iterations of an earlier run (processes calibrating side by side
    // would each find the GPU half as fast).
    const char* fixed = std::getenv("PROBE_ITERS");
    const int iters = fixed ? std::atoi(fixed) : calibrate(p, blocks, 20000.0);
    const double end = now_us() + std::atof(argv[2]) * 1e6;
    int launches = 0;
    // PROBE_SM_LOG=FILE: a line per launch: its time and how its tasks fell on the SMs.
    const char* sm_log = std::getenv("PROBE_SM_LOG");
    FILE* log = sm_log ? std::fopen(sm_log, "w") : nullptr;
    unsigned* per_sm = nullptr;
    if (log) check(cudaMallocManaged(&per_sm, 1024 * sizeof(unsigned)), "cudaMallocManaged");
    std::signal(SIGTERM, [](int) { stop_batch = 1; });
    while (now_us() < end && !stop_batch) {
      const double t0 = now_us();
      if (log) {
        std::memset(per_sm, 0, 1024 * sizeof(unsigned));
        spin_counted<<<blocks, 256>>>(p, iters, per_sm);
      } else {
        spin<<<blocks, 256>>>(p, iters);
      }
      check(cudaDeviceSynchronize(), "batch");
      ++launches;
      if (log) {
        int used = 0;
        unsigned most = 0, least = ~0u;
        for (int s = 0; s < 1024; ++s) {
          if (!per_sm[s]) continue;
          ++used;
          most = std::max(most, per_sm[s]);
          least = std::min(least, per_sm[s]);
        }
        // SMs as ranges: those that ran any task, and those that ran more than half the
        // busiest SM's tasks.
        auto ranges = [&](unsigned above) {
          std::string r;
          for (int s = 0; s < 1024; ++s) {
            if (per_sm[s] <= above || (s > 0 && per_sm[s - 1] > above)) continue;
            int e = s;
            while (e + 1 < 1024 && per_sm[e + 1] > above) ++e;
            r += (r.empty() ? "" : ",") + std::to_string(s) + (e > s ? "-" + std::to_string(e) : "");
          }
          return r;
        };
        std::fprintf(log,
                     "launch %d at %.0f us: %.2f ms, tasks on %d SMs (%u to %u each): ran on %s, "
                     "busy %s\n",
                     launches, t0, (now_us() - t0) / 1e3, used, least, most, ranges(0).c_str(),
                     ranges(most / 2).c_str());
      }
    }
    if (log) std::fclose(log);
    std::printf("batch: %d launches (iters %d)\n", launches, iters);
    return 0;
  }
  if (std::strcmp(argv[1], "calibrate") == 0) {
    std::printf("iters %d\n", calibrate(p, blocks, std::atof(argv[2])));
    return 0;
  }
  const bool cold = std::strcmp(argv[1], "job-cold") == 0;
  if (cold || std::strcmp(argv[1], "job") == 0) {
    if (argc < 4) {
      std::fprintf(stderr, "usage: %s job ITERS AT_US\n", argv[0]);
      return 2;
    }
    const int iters = std::atoi(argv[2]);
    // Warm: the module, the wrappers and the runtime's setup are done before the set time
    // (the same grid, so that the timed launch is preemptible; the probe sets
    // CUPREEMPT_SHORT_US=0, or the warm-up's short run would make it run the original).
    spin<<<cold ? 1 : blocks, 256>>>(p, 1);
    check(cudaDeviceSynchronize(), "warm-up");
    const double at = std::atof(argv[3]);
    while (now_us() < at) {
    }
    const double t0 = now_us();
    spin<<<blocks, 256>>>(p, iters);
    check(cudaDeviceSynchronize(), "job");
    std::printf("job: turnaround_us %.1f late_us %.1f\n", now_us() - t0, t0 - at);
    return 0;
  }
  if (!urgent) {
    std::fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
  }
  const int iters = calibrate(p, blocks, 100.0);
  const int count = std::atoi(argv[2]);
  // PROBE_HIGH_PRIORITY=1: the urgent kernels go on a stream of the greatest priority (the
  // baseline a CUDA user has without a scheduler).
  cudaStream_t stream = nullptr;
  if (std::getenv("PROBE_HIGH_PRIORITY")) {
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "priority range");
    check(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest), "stream");
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> wait_us(2000, 10000);
  std::vector<double> took;
  for (int i = 0; i < count; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(wait_us(rng)));
    const double t0 = now_us();
    spin<<<blocks, 256, 0, stream>>>(p, iters);
    check(cudaStreamSynchronize(stream), "urgent");
    took.push_back(now_us() - t0);
  }
  std::sort(took.begin(), took.end());
  double sum = 0;
  for (double t : took) sum += t;
  std::printf("urgent: n %d p50_us %.1f p99_us %.1f mean_us %.1f\n", count,
              took[took.size() / 2], took[std::min(took.size() - 1, took.size() * 99 / 100)],
              sum / took.size());
  return 0;
}
