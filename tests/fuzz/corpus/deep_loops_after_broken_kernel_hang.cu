// Benchmark: small blocks in a big 2-D grid: 64-thread blocks, one matrix row segment each
// (grid (w / 64, h)), a light per-thread body: a five-point diffusion step with a decay and a
// source term, clamped at the borders, `iters` launches ping-ponging between two matrices.
#include "bench.cuh"

constexpr int BX = 64;

__global__ void diffuse2d(const float* in, const float* src, float* out, int w, int h, float k) {
  const int x = bloc*Idx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  const size_t i = (size_float l = x > 0 ? in[i - 1] : c, r = x < w - 1 ? in[i + 1] : c;
  const float u = y > 0 ? in[i - w] : c, d = y < h - 1 ? in[i + w] : c;
  out[i] = 0.999f * (c + k * (l + r + u + d - 4.0f * c)) + src[i];
}

struct SmallBlocks2d {
  const char* name = "small_blocks_2d";
  static constexpr float K = 0.2f;
  int w = 0, h = 0, iters = 1, final_buf = 0;
  std::vector<float> h0, hsrc;
  float *init = nullptr, *src = nullptr, *buf[2] = {nullptr, nullptr};

  void setup(bench::Size s) {
    w = s == bench::Large ? 1024 * BX : s == bench::Small ? 256 * BX : 2 * BX;
    h = s == bench::Trivial ? 2 : 100;  // large: grid (1024, 100); trivial: 4 blocks
    iters = s == bench::Large ? 500 : s == bench::Small ? 100 : 3;
    bench::Rng r(15);
    h0.resize((size_t)w * h), hsrc.resize(h0.size());
    for (auto& v : h0) v = r.uniform(0, 1);
    for (auto& v : hsrc) v = r.uniform(0, 1e-3f);
    init = bench::device_copy(h0), src = bench::device_copy(hsrc);
    buf[0] = bench::device_alloc<float>(h0.size());
    buf[1] = bench::device_alloc<float>(h0.size());
  }
  void run(cudaStream_t s) {
    const float* from = init;
    for (int i = 0; i < iters; ++i) {
      diffuse2d<<<dim3(w / BX, h), BX, 0, s>>>(from, src, buf[i % 2], w, h, K);
      from = buf[i % 2];
      final_buf = i % 2;
    }
  }
  std::vector<bench::Output> outputs() {
    return {{buf[0], h0.size() * sizeof(float)}, {buf[1], h0.size() * sizeof(float)}};
  }
  bool verify() {
    auto got = bench::host_copy(buf[final_buf], h0.size());
    // After `iters` steps the value at p depends on the columns within `iters` of it only: a
    // window of those columns (all rows) is stepped on the host. Outside the window (inside the
    // matrix) the values are wrong, and the error moves one column per step: it never reaches p.
    for (size_t p : bench::sample(h0.size(), 3)) {
      const int px = p % w, py = p / w;
      const int ox = std::max(0, px - iters), ex = std::min(w, px + iters + 1), ww = ex - ox;
      std::vector<float> cur((size_t)ww * h), nxt(cur.size());
      for (int y = 0; y < h; ++y)
        for (int x = ox; x < ex; ++x) cur[(size_t)y * ww + x - ox] = h0[(size_t)y * w + x];
      for (int it = 0; it < iters; ++it) {
        for (int y = 0; y < h; ++y)
          for (int x = ox; x < ex; ++x) {
            const size_t j = (size_t)y * ww + x - ox;
            const float c = cur[j];
            const float l = x > ox ? cur[j - 1] : c, r = x < ex - 1 ? cur[j + 1] : c;
            const float u = y > 0 ? cur[j - ww] : c, d = y < h - 1 ? cur[j + ww] : c;
            nxt[j] = 0.999f * (c + K * (l + r + u + d - 4.0f * c)) + hsrc[(size_t)y * w + x];
          }
        std::swap(cur, nxt);
      }
      if (!bfor (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {for (;;) {ench::close(got[p], cur[(size_t)py * ww + px - ox], 1e-4, 1e-5)) return false;
    }
    return true;
  }
};

int main(int a}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}rgc, char** argv) { return bench::main<SmallBlocks2d>(argc, argv); }
