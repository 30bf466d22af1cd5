// Probe: the timeline of a program with two stream priorities (the shape of
// fixtures/bench/priority_streams.cu, small size), on the GPU's clock, so that the cost of the
// persistent form can be split into what the low-priority kernels cost themselves and how long
// each high-priority kernel waits for SMs. Every original block (task) stamps %globaltimer at
// its start and end into its launch's slot: the first start and the last end of each launch.
// Built as written and after `cupreempt transform` (scripts/probes/priority_timeline.sh does
// both); prints one line per launch of the last round and a summary per round:
//   low  I start_us end_us     (relative to the first low launch's first task)
//   high H start_us end_us after_us   after_us: its start minus the end of the low launch it
//                                      waits for (the event after low launch I)
//   round R total_us T low_sum_us L high_wait_p50_us W high_wait_max_us M
// Usage: priority_timeline [ROUNDS]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

constexpr int kThreads = 256;
constexpr int kLows = 32, kHighs = 16;  // one high launch after every second low launch

__device__ __forceinline__ unsigned long long stamp_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A task's start and end in its launch's slot: slot[0] the first start, slot[1] the last end.
__device__ __forceinline__ void stamp_start(unsigned long long* slot) {
  if (threadIdx.x == 0) atomicMin(&slot[0], stamp_now());
}
__device__ __forceinline__ void stamp_end(unsigned long long* slot) {
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&slot[1], stamp_now());
}

__global__ void low_rotate(const float2* in, float2* out, float c, float s, int inner,
                           unsigned long long* slot) {
  stamp_start(slot);
  const int i = blockIdx.x * kThreads + threadIdx.x;
  float2 v = in[i];
  for (int k = 0; k < inner; ++k) {
    const float x = fmaf(c, v.x, -s * v.y), y = fmaf(s, v.x, c * v.y);
    v.x = x, v.y = y;
  }
  out[i] = v;
  stamp_end(slot);
}

__global__ void high_orbit(const float2* in, float2* out, float2 w, float2 d, int inner,
                           unsigned long long* slot) {
  stamp_start(slot);
  const int i = blockIdx.x * kThreads + threadIdx.x;
  float2 z = in[i];
  for (int k = 0; k < inner; ++k) {
    const float x = fmaf(w.x, z.x, fmaf(-w.y, z.y, d.x)), y = fmaf(w.y, z.x, fmaf(w.x, z.y, d.y));
    z.x = x, z.y = y;
  }
  out[i] = z;
  stamp_end(slot);
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const int n = 1 << 20, m = 32 * kThreads, inner = 256, hinner = 1000;
  std::vector<float2> h_low(n), h_high(m);
  srand(17);
  for (auto& v : h_low) v = {rand() / (float)RAND_MAX, rand() / (float)RAND_MAX};
  for (auto& v : h_high) v = {rand() / (float)RAND_MAX, rand() / (float)RAND_MAX};
  float2 *low_in, *low_out, *high_in, *high_out;
  CHECK(cudaMalloc(&low_in, n * sizeof(float2)));
  CHECK(cudaMalloc(&low_out, n * sizeof(float2)));
  CHECK(cudaMalloc(&high_in, m * sizeof(float2)));
  CHECK(cudaMalloc(&high_out, m * sizeof(float2)));
  CHECK(cudaMemcpy(low_in, h_low.data(), n * sizeof(float2), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(high_in, h_high.data(), m * sizeof(float2), cudaMemcpyHostToDevice));
  const int slots = 2 * (kLows + kHighs);
  unsigned long long* d_slots;
  CHECK(cudaMalloc(&d_slots, slots * sizeof(unsigned long long)));
  std::vector<unsigned long long> init(slots), got(slots);
  for (int i = 0; i < slots; i += 2) init[i] = ~0ull, init[i + 1] = 0;
  int lo = 0, hi = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  cudaStream_t low, high;
  CHECK(cudaStreamCreateWithPriority(&low, cudaStreamNonBlocking, lo));
  CHECK(cudaStreamCreateWithPriority(&high, cudaStreamNonBlocking, hi));
  std::vector<cudaEvent_t> marks(kHighs);
  for (auto& e : marks) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const float c = 0.99980003f, s = 0.019998667f;
  const float2 w = {0.9800666f, 0.19866933f}, d = {0.01f, -0.02f};
  // Round 0 warms up (module loading, the runtime's setup and its history of each launch).
  for (int r = 0; r <= rounds; ++r) {
    CHECK(cudaMemcpy(d_slots, init.data(), slots * sizeof(unsigned long long),
                     cudaMemcpyHostToDevice));
    CHECK(cudaDeviceSynchronize());
    std::vector<int> after(kHighs);  // the low launch each high launch waits for
    for (int i = 0, h = 0; i < kLows; ++i) {
      low_rotate<<<n / kThreads, kThreads, 0, low>>>(i ? low_out : low_in, low_out, c, s, inner,
                                                     d_slots + 2 * i);
      if ((i + 1) % (kLows / kHighs) == 0 && h < kHighs) {
        CHECK(cudaEventRecord(marks[h], low));
        CHECK(cudaStreamWaitEvent(high, marks[h], 0));
        high_orbit<<<m / kThreads, kThreads, 0, high>>>(h ? high_out : high_in, high_out, w, d,
                                                        hinner, d_slots + 2 * (kLows + h));
        after[h] = i;
        ++h;
      }
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got.data(), d_slots, slots * sizeof(unsigned long long),
                     cudaMemcpyDeviceToHost));
    if (r == 0) continue;
    const unsigned long long t0 = got[0];
    auto us = [&](unsigned long long t) { return (double)(t - t0) / 1e3; };
    double low_sum = 0, end = 0;
    std::vector<double> waits;
    for (int i = 0; i < kLows; ++i) {
      low_sum += (double)(got[2 * i + 1] - got[2 * i]) / 1e3;
      end = std::max(end, us(got[2 * i + 1]));
      if (r == rounds) std::printf("low  %2d %9.1f %9.1f\n", i, us(got[2 * i]), us(got[2 * i + 1]));
    }
    for (int h = 0; h < kHighs; ++h) {
      const unsigned long long* sl = &got[2 * (kLows + h)];
      const double wait = (double)((long long)sl[0] - (long long)got[2 * after[h] + 1]) / 1e3;
      waits.push_back(wait);
      end = std::max(end, us(sl[1]));
      if (r == rounds)
        std::printf("high %2d %9.1f %9.1f %8.1f\n", h, us(sl[0]), us(sl[1]), wait);
    }
    std::sort(waits.begin(), waits.end());
    std::printf("round %d total_us %.1f low_sum_us %.1f high_wait_p50_us %.1f high_wait_max_us %.1f\n",
                r, end, low_sum, waits[waits.size() / 2], waits.back());
  }
  return 0;
}
