// GPU test harness for transformed fixtures (generated mains include this; see tests/gpu.rs).
//
// For one kernel launch it runs the original kernel for a reference, then the persistent
// wrapper under several scenarios, and checks each against the reference bit for bit, with
// output buffers poisoned before every run and every task counted (CUPREEMPT_AUDIT):
//   plain       full persistent grid, no preemption
//   temporal    2 blocks, chunk 1, YIELD_ALL once a third of the tasks are done, then resume
//   spatial     one block per SM, chunk 1, YIELD_SMS for even SMs: the rest finish the work
//   adaptive    one block per SM, adaptive chunks, YIELD_ALL once half the tasks are taken,
//               resume (with the full grid, every block takes its tasks at once and nothing is
//               left to yield)
//   cycles      5 preempt/resume cycles at increasing points
// CUPREEMPT_HARNESS_QUICK=1 (for compute-sanitizer) runs the reference and `plain` only.
// Prints one line per scenario and exits non-zero on any failure.
#pragma once
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#define CPT_CHECK(x)                                                                    \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, \
                   __LINE__, #x);                                                       \
      std::exit(3);                                                                     \
    }                                                                                   \
  } while (0)

namespace cupreempt_test {

enum Kind { In, Out, InOut };

struct Buffer {
  void* dev = nullptr;
  size_t bytes = 0;
  Kind kind = In;
  std::vector<unsigned char> init;
};

// Waits (on the GPU) until `at` tasks are done (or, `by_claims`, taken), then writes the
// command. Gives up after 2 s so that a bug cannot hang the machine.
__global__ void trigger(cupreempt_control* c, unsigned long long at, unsigned command,
                        unsigned mask_even, unsigned by_claims) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    const unsigned long long* counter = by_claims ? &c->next_task : &c->done_tasks;
    if (*(volatile const unsigned long long*)counter >= at) break;
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > 2000000000ull) break;
  }
  if (mask_even)
    for (int w = 0; w < CUPREEMPT_MAX_SMS / 32; ++w) c->sm_mask[w] = 0x55555555u;
  __threadfence_system();
  *(volatile unsigned*)&c->command = command;
}

using Persistent = std::function<void(cupreempt_launch, dim3, cudaStream_t)>;

class Harness {
 public:
  Harness(const char* name, unsigned seed) : name_(name), rng_(seed) {}

  template <class T>
  T* buffer(size_t n, Kind kind) {
    Buffer b;
    b.bytes = n * sizeof(T);
    b.kind = kind;
    b.init.resize(b.bytes);
    if (kind != Out) {
      std::vector<T> v(n);
      for (auto& x : v) x = random<T>();
      std::memcpy(b.init.data(), v.data(), b.bytes);
    }
    CPT_CHECK(cudaMalloc(&b.dev, b.bytes));
    bufs_.push_back(b);
    return (T*)b.dev;
  }

  template <class T>
  T random() {
    if constexpr (std::is_floating_point<T>::value) {
      return (T)std::uniform_real_distribution<double>(-1.0, 1.0)(rng_);
    } else if constexpr (std::is_signed<T>::value) {
      return (T)std::uniform_int_distribution<long long>(-100000, 100000)(rng_);
    } else {
      return (T)std::uniform_int_distribution<unsigned long long>(0, 0xffffffffull)(rng_);
    }
  }

  // Inputs restored, outputs poisoned.
  void prepare() {
    for (auto& b : bufs_) {
      if (b.kind == Out)
        CPT_CHECK(cudaMemset(b.dev, 0xCD, b.bytes));
      else
        CPT_CHECK(cudaMemcpy(b.dev, b.init.data(), b.bytes, cudaMemcpyHostToDevice));
    }
    CPT_CHECK(cudaDeviceSynchronize());
  }

  std::vector<std::vector<unsigned char>> results() {
    std::vector<std::vector<unsigned char>> r;
    for (auto& b : bufs_) {
      if (b.kind == In) continue;
      std::vector<unsigned char> v(b.bytes);
      CPT_CHECK(cudaMemcpy(v.data(), b.dev, b.bytes, cudaMemcpyDeviceToHost));
      r.push_back(std::move(v));
    }
    return r;
  }

  int run(dim3 grid, dim3 block, size_t smem, const std::function<void(cudaStream_t)>& original,
          const Persistent& persistent, const void* wrapper) {
    total_ = (unsigned long long)grid.x * grid.y * grid.z;
    grid_ = grid;
    CPT_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, 0));
    int per_sm = 0;
    CPT_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, wrapper, (int)(block.x * block.y * block.z), smem));
    full_ = (unsigned)std::min<unsigned long long>(total_, (unsigned long long)per_sm * sms_);
    CPT_CHECK(cudaMalloc(&control_, sizeof(cupreempt_control)));
    CPT_CHECK(cudaMalloc(&leftover_, CUPREEMPT_MAX_SMS * CUPREEMPT_LANES * sizeof(unsigned long long)));
    CPT_CHECK(cudaMalloc(&audit_, (total_ + CUPREEMPT_MAX_SMS / 32) * sizeof(unsigned)));
    CPT_CHECK(cudaStreamCreateWithFlags(&work_, cudaStreamNonBlocking));
    CPT_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));

    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a hang still shows how far we got
    std::printf("%s: %llu tasks, %u persistent blocks\n", name_.c_str(), total_, full_);
    prepare();
    original(work_);
    CPT_CHECK(cudaGetLastError());
    CPT_CHECK(cudaDeviceSynchronize());
    reference_ = results();
    std::printf("  ok   reference (original kernel)\n");
    const bool quick = std::getenv("CUPREEMPT_HARNESS_QUICK") != nullptr;

    scenario("plain", persistent, full_, 0, {});
    if (!quick) {
      scenario("temporal", persistent, 2, 1, {{total_ / 3, CUPREEMPT_YIELD_ALL}});
      scenario("spatial", persistent, (unsigned)std::min<unsigned long long>(total_, sms_), 1,
               {{total_ / 4, CUPREEMPT_YIELD_SMS}});
      scenario("adaptive", persistent, (unsigned)std::min<unsigned long long>(total_, sms_), 0,
               {{total_ / 2, CUPREEMPT_YIELD_ALL, true}});
      std::vector<Preemption> cycles;
      for (int k = 1; k <= 5; ++k) cycles.push_back({total_ * k / 6, CUPREEMPT_YIELD_ALL});
      scenario("cycles", persistent, 4, 1, cycles);
#ifdef CUPREEMPT_LOOKS
      // Chunks of 16 tasks with looks inside: a yield mid-chunk gives the rest back. (Without
      // looks a full grid claims every task in its first chunks, and the yields would land
      // after the end: the scenarios above give back the chunks claimed beside a yield.)
      std::vector<Preemption> cuts;
      for (int k = 1; k <= 3; ++k) cuts.push_back({total_ * k / 4, CUPREEMPT_YIELD_ALL, true});
      scenario("cut", persistent, full_, 16, cuts);
#endif
    }
    std::printf("%s %s: %d scenario(s) failed\n", failures_ ? "FAIL" : "PASS", name_.c_str(),
                failures_);
    return failures_ ? 1 : 0;
  }

 private:
  struct Preemption {
    unsigned long long at;
    unsigned command;
    bool by_claims = false;  // `at` counts tasks taken, not done
  };

  void launch(const Persistent& p, unsigned blocks, unsigned chunk) {
    cupreempt_launch l = {control_, total_, grid_.x, grid_.y, grid_.z, chunk, 0, audit_};
    l.leftover = leftover_;
    p(l, dim3(blocks), work_);
    CPT_CHECK(cudaGetLastError());
  }

  cupreempt_control read_control() {
    cupreempt_control c;
    CPT_CHECK(cudaMemcpy(&c, control_, sizeof c, cudaMemcpyDeviceToHost));
    return c;
  }

  void scenario(const char* what, const Persistent& p, unsigned blocks, unsigned chunk,
                const std::vector<Preemption>& preemptions) {
    prepare();
    CPT_CHECK(cudaMemset(control_, 0, sizeof(cupreempt_control)));
    CPT_CHECK(cudaMemset(audit_, 0, (total_ + CUPREEMPT_MAX_SMS / 32) * sizeof(unsigned)));
    CPT_CHECK(cudaDeviceSynchronize());
    std::string notes;
    bool ok = true;
    unsigned relaunches = 0;
    for (const auto& pre : preemptions) {
      trigger<<<1, 1, 0, side_>>>(control_, pre.at, pre.command,
                                  pre.command == CUPREEMPT_YIELD_SMS, pre.by_claims);
      CPT_CHECK(cudaGetLastError());
      launch(p, blocks, chunk);
      CPT_CHECK(cudaDeviceSynchronize());
      cupreempt_control c = read_control();
      char buf[160];
      std::snprintf(buf, sizeof buf, " [yield at %llu: done %llu/%llu, %u blocks yielded]",
                    pre.at, c.done_tasks, total_, c.yielded_blocks);
      notes += buf;
      if (c.running_blocks != 0) {
        notes += " running_blocks!=0";
        ok = false;
      }
      // A yield that lands after the last task proves nothing about preemption.
      if (pre.command == CUPREEMPT_YIELD_ALL && pre.at < total_ && c.done_tasks >= total_) {
        notes += " finished before the yield landed";
        ok = false;
      }
      if (pre.command == CUPREEMPT_YIELD_SMS) {
        if (c.yielded_blocks == 0) {
          notes += " no block yielded";
          ok = false;
        }
        if (c.done_tasks != total_) {
          notes += " spatial yield left tasks undone";
          ok = false;
        }
        std::vector<unsigned> sms(CUPREEMPT_MAX_SMS / 32);
        CPT_CHECK(cudaMemcpy(sms.data(), audit_ + total_, sms.size() * sizeof(unsigned),
                             cudaMemcpyDeviceToHost));
        for (unsigned w : sms)
          if (w & ~0x55555555u) {
            notes += " a block on an odd SM yielded";
            ok = false;
          }
      }
      // Resume: clear the command and relaunch on the same counter.
      CPT_CHECK(cudaMemset(&control_->command, 0, sizeof(unsigned)));
      CPT_CHECK(cudaDeviceSynchronize());  // the relaunch runs on a non-blocking stream
      ++relaunches;
    }
    launch(p, blocks == 2 || blocks == 4 ? full_ : blocks, chunk);
    CPT_CHECK(cudaDeviceSynchronize());
    cupreempt_control c = read_control();
    if (c.done_tasks != total_) {
      notes += " done_tasks=" + std::to_string(c.done_tasks);
      ok = false;
    }
    if (c.retired_tasks != total_) {
      notes += " retired_tasks=" + std::to_string(c.retired_tasks);
      ok = false;
    }
    if (c.finished != 1) {
      notes += " finished flag not raised";
      ok = false;
    }
    if (c.leftovers != 0) {
      notes += " leftovers not all taken (" + std::to_string(c.leftovers) + ")";
      ok = false;
    }
    if (c.cut_chunks) notes += " cut=" + std::to_string(c.cut_chunks);
    for (unsigned n : c.sm_lanes)
      if (n != 0) {
        notes += " sm_lanes not back to 0";
        ok = false;
        break;
      }
    std::vector<unsigned> audit(total_);
    CPT_CHECK(cudaMemcpy(audit.data(), audit_, total_ * sizeof(unsigned), cudaMemcpyDeviceToHost));
    unsigned long long wrong = 0, first = total_;
    for (unsigned long long t = 0; t < total_; ++t)
      if (audit[t] != 1) {
        ++wrong;
        if (first == total_) first = t;
      }
    if (wrong) {
      notes += " " + std::to_string(wrong) + " tasks not run exactly once (first: task " +
               std::to_string(first) + " ran " + std::to_string(audit[first]) + "x)";
      ok = false;
    }
    auto got = results();
    for (size_t i = 0; i < got.size(); ++i) {
      size_t diff = 0, at = got[i].size();
      for (size_t j = 0; j < got[i].size(); ++j)
        if (got[i][j] != reference_[i][j]) {
          ++diff;
          if (at == got[i].size()) at = j;
        }
      if (diff) {
        notes += " output " + std::to_string(i) + ": " + std::to_string(diff) +
                 " bytes differ (first at byte " + std::to_string(at) + ")";
        ok = false;
      }
    }
    std::printf("  %s %-9s blocks=%u chunk=%u relaunches=%u%s\n", ok ? "ok  " : "FAIL", what,
                blocks, chunk, relaunches, notes.c_str());
    if (!ok) ++failures_;
  }

  std::string name_;
  std::mt19937_64 rng_;
  std::vector<Buffer> bufs_;
  std::vector<std::vector<unsigned char>> reference_;
  unsigned long long total_ = 0;
  dim3 grid_;
  int sms_ = 0;
  unsigned full_ = 0;
  cupreempt_control* control_ = nullptr;
  unsigned long long* leftover_ = nullptr;
  unsigned* audit_ = nullptr;
  cudaStream_t work_ = nullptr, side_ = nullptr;
  int failures_ = 0;
};

}  // namespace cupreempt_test
