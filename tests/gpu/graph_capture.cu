// Run by scripts/gpu-check.sh, transformed and linked with the runtime (and untransformed, which
// must pass too). Launches on a stream being captured into a CUDA graph must become ordinary
// kernel nodes of the original kernels (the runtime answers CUPREEMPT_RUN_ORIGINAL), the capture
// must stay valid in every capture mode, every replay must compute bit for bit what the eager
// launches compute, and eager launches after the captures must still be right.
//
// A pipeline of three kernels over a 2048 x 2048 matrix of random 32-bit words:
//   mix      1-D, 16384 blocks of 256 threads (many waves on any GPU);
//   tile     2-D grid of 64 x 256 blocks of 32 x 8 threads;
//   scan     dynamic shared memory and __syncthreads (a block-wide prefix sum), 16384 blocks.
// Unsigned arithmetic only, so the host computes the exact expected result as well.
// One line per check ("  ok ..." or "FAIL ..."), then "graph_capture: N passed, M failed";
// exit status 1 on any failure.
#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

constexpr int W = 2048, H = 2048, N = W * H, BLOCK = 256, REPLAYS = 20;
constexpr size_t BYTES = size_t(N) * sizeof(unsigned);
constexpr unsigned char POISON = 0xA5;

__host__ __device__ inline unsigned rotl(unsigned v, unsigned s) {
  s &= 31;
  return s ? (v << s) | (v >> (32 - s)) : v;
}
__host__ __device__ inline unsigned mix_one(unsigned a, unsigned i) {
  return a * 2654435761u + (i ^ 0x9e3779b9u);
}
__host__ __device__ inline unsigned tile_one(unsigned here, unsigned mirror, unsigned x, unsigned y) {
  return (here ^ rotl(mirror, x + y)) + x * (y + 1);
}

__global__ void mix(const unsigned* a, unsigned* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = mix_one(a[i], (unsigned)i);
}

__global__ void tile(const unsigned* b, unsigned* c, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) c[y * w + x] = tile_one(b[y * w + x], b[y * w + (w - 1 - x)], x, y);
}

// Inclusive prefix sum of each block's slice, then each element xor its mirror in the block.
__global__ void scan(const unsigned* c, unsigned* d, int n) {
  extern __shared__ unsigned s[];
  int t = threadIdx.x;
  int i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? c[i] : 0u;
  __syncthreads();
  for (int off = 1; off < blockDim.x; off *= 2) {
    unsigned v = t >= off ? s[t - off] : 0u;
    __syncthreads();
    s[t] += v;
    __syncthreads();
  }
  if (i < n) d[i] = s[t] ^ s[blockDim.x - 1 - t];
}

struct Buffers {
  unsigned *a, *b, *c, *d;
};

// The pipeline on `s`; with `side`, the 2-D kernel runs on `side` (fork and join by events).
static void pipeline(const Buffers& m, cudaStream_t s, cudaStream_t side = nullptr,
                     cudaEvent_t fork = nullptr, cudaEvent_t join = nullptr) {
  mix<<<N / BLOCK, BLOCK, 0, s>>>(m.a, m.b, N);
  cudaStream_t s2 = s;
  if (side) {
    cudaEventRecord(fork, s);
    cudaStreamWaitEvent(side, fork, 0);
    s2 = side;
  }
  tile<<<dim3(W / 32, H / 8), dim3(32, 8), 0, s2>>>(m.b, m.c, W, H);
  if (side) {
    cudaEventRecord(join, side);
    cudaStreamWaitEvent(s, join, 0);
  }
  scan<<<N / BLOCK, BLOCK, BLOCK * sizeof(unsigned), s>>>(m.c, m.d, N);
}

static void poison(const Buffers& m, cudaStream_t s) {
  cudaMemsetAsync(m.b, POISON, BYTES, s);
  cudaMemsetAsync(m.c, POISON, BYTES, s);
  cudaMemsetAsync(m.d, POISON, BYTES, s);
}

static int passed = 0, failed = 0;

static bool check(bool ok, const char* fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  std::printf("%s graph_capture: %s\n", ok ? "  ok" : "FAIL", line);
  std::fflush(stdout);
  (ok ? passed : failed)++;
  return ok;
}

static bool cuda_ok(cudaError_t e, const char* what) {
  return check(e == cudaSuccess, "%s: %s", what, cudaGetErrorName(e));
}

struct Result {
  std::vector<unsigned> b, c, d;
};

static Result copy_back(const Buffers& m) {
  Result r{std::vector<unsigned>(N), std::vector<unsigned>(N), std::vector<unsigned>(N)};
  cudaMemcpy(r.b.data(), m.b, BYTES, cudaMemcpyDeviceToHost);
  cudaMemcpy(r.c.data(), m.c, BYTES, cudaMemcpyDeviceToHost);
  cudaMemcpy(r.d.data(), m.d, BYTES, cudaMemcpyDeviceToHost);
  return r;
}

// "" if equal bit for bit, else where they first differ.
static std::string differs(const Result& got, const Result& want) {
  const std::vector<unsigned>* g[] = {&got.b, &got.c, &got.d};
  const std::vector<unsigned>* w[] = {&want.b, &want.c, &want.d};
  const char* names[] = {"mix", "tile", "scan"};
  for (int k = 0; k < 3; k++) {
    if (std::memcmp(g[k]->data(), w[k]->data(), BYTES) == 0) continue;
    int i = 0;
    while ((*g[k])[i] == (*w[k])[i]) i++;
    char msg[160];
    std::snprintf(msg, sizeof msg, "%s output differs first at %d: 0x%08x, expected 0x%08x",
                  names[k], i, (*g[k])[i], (*w[k])[i]);
    return msg;
  }
  return "";
}

// Runs the pipeline on `s` from poisoned outputs, waits, checks against `want`.
static bool eager(const char* what, const Buffers& m, cudaStream_t s, const Result& want) {
  poison(m, s);
  pipeline(m, s);
  cudaError_t launch = cudaGetLastError();
  cudaError_t sync = cudaStreamSynchronize(s);
  if (!check(launch == cudaSuccess && sync == cudaSuccess, "%s: launches %s, stream %s", what,
             cudaGetErrorName(launch), cudaGetErrorName(sync)))
    return false;
  std::string diff = differs(copy_back(m), want);
  return check(diff.empty(), "%s: %s", what, diff.empty() ? "matches the reference" : diff.c_str());
}

struct Capture {
  const char* name;
  cudaStreamCaptureMode mode;
  unsigned stream_flags;   // cudaStreamDefault or cudaStreamNonBlocking
  bool fork_join;          // the 2-D kernel on a second stream joined into the capture
  bool memset_in_graph;    // poison inside the graph (memset nodes) instead of before replays
  bool other_thread;       // capture on a thread of its own
};

static const char* mode_name(cudaStreamCaptureMode m) {
  return m == cudaStreamCaptureModeGlobal   ? "global"
         : m == cudaStreamCaptureModeRelaxed ? "relaxed"
                                             : "thread-local";
}

// Captures the pipeline into a graph and instantiates it; checks that the capture stays valid
// and that the graph holds exactly the three original kernels. Null on failure.
static cudaGraphExec_t capture(const Capture& c, const Buffers& m, cudaStream_t s) {
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  if (c.fork_join) {
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
  }
  cudaGraphExec_t exec = nullptr;
  cudaGraph_t graph = nullptr;
  char what[160];
  std::snprintf(what, sizeof what, "%s: cudaGetLastError before capture", c.name);
  cuda_ok(cudaGetLastError(), what);
  std::snprintf(what, sizeof what, "%s: cudaStreamBeginCapture(%s)", c.name, mode_name(c.mode));
  if (cuda_ok(cudaStreamBeginCapture(s, c.mode), what)) {
    if (c.memset_in_graph) poison(m, s);
    pipeline(m, s, side, fork, join);
    cudaError_t launch = cudaGetLastError();
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaError_t query = cudaStreamIsCapturing(s, &status);
    check(launch == cudaSuccess && query == cudaSuccess && status == cudaStreamCaptureStatusActive,
          "%s: after the launches: cudaGetLastError %s, capture %s", c.name,
          cudaGetErrorName(launch),
          query != cudaSuccess ? cudaGetErrorName(query)
          : status == cudaStreamCaptureStatusActive ? "active"
          : status == cudaStreamCaptureStatusInvalidated ? "INVALIDATED"
                                                         : "not capturing");
    std::snprintf(what, sizeof what, "%s: cudaStreamEndCapture", c.name);
    cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (cuda_ok(end, what) && check(graph != nullptr, "%s: graph made", c.name)) {
      size_t count = 0;
      cudaGraphGetNodes(graph, nullptr, &count);
      std::vector<cudaGraphNode_t> nodes(count);
      cudaGraphGetNodes(graph, nodes.data(), &count);
      int kernels = 0, originals = 0, memsets = 0, others = 0;
      cudaError_t params_error = cudaSuccess;
      for (cudaGraphNode_t node : nodes) {
        cudaGraphNodeType type;
        cudaGraphNodeGetType(node, &type);
        if (type == cudaGraphNodeTypeKernel) {
          kernels++;
          cudaKernelNodeParams p;
          cudaError_t e = cudaGraphKernelNodeGetParams(node, &p);
          if (e != cudaSuccess) params_error = e;
          if (e == cudaSuccess &&
              (p.func == (void*)mix || p.func == (void*)tile || p.func == (void*)scan))
            originals++;
        } else if (type == cudaGraphNodeTypeMemset) {
          memsets++;
        } else {
          others++;
        }
      }
      (void)cudaGetLastError();
      int want_memsets = c.memset_in_graph ? 3 : 0;
      check(kernels == 3 && originals == 3 && memsets == want_memsets && others == 0,
            "%s: graph nodes: %d kernel (%d of them the original kernels%s%s), %d memset, "
            "%d other; expected 3 (3), %d, 0",
            c.name, kernels, originals, params_error ? "; cudaGraphKernelNodeGetParams: " : "",
            params_error ? cudaGetErrorName(params_error) : "", memsets, others, want_memsets);
      std::snprintf(what, sizeof what, "%s: cudaGraphInstantiate", c.name);
      if (!cuda_ok(cudaGraphInstantiateWithFlags(&exec, graph, 0), what)) exec = nullptr;
      cudaGraphDestroy(graph);
    }
  }
  (void)cudaGetLastError();
  if (c.fork_join) {
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    cudaStreamDestroy(side);
  }
  return exec;
}

// Replays `exec` REPLAYS times from poisoned outputs and compares every replay with `want`.
static void replay(const Capture& c, cudaGraphExec_t exec, const Buffers& m, cudaStream_t s,
                   const Result& want) {
  int bad = 0;
  std::string first;
  for (int r = 0; r < REPLAYS; r++) {
    if (!c.memset_in_graph) poison(m, s);
    cudaError_t e = cudaGraphLaunch(exec, s);
    cudaError_t sync = cudaStreamSynchronize(s);
    std::string diff;
    if (e != cudaSuccess || sync != cudaSuccess)
      diff = std::string("cudaGraphLaunch ") + cudaGetErrorName(e) + ", stream " +
             cudaGetErrorName(sync);
    else
      diff = differs(copy_back(m), want);
    if (!diff.empty() && bad++ == 0) first = "replay " + std::to_string(r) + ": " + diff;
  }
  check(bad == 0, "%s: %d of %d replays bit-identical to the eager launches%s%s", c.name,
        REPLAYS - bad, REPLAYS, bad ? "; first bad " : "", first.c_str());
}

int main() {
  // Inputs from a fixed seed; the expected result computed here.
  std::vector<unsigned> a(N);
  std::mt19937 rng(20240611u);
  for (unsigned& v : a) v = rng();
  Result host{std::vector<unsigned>(N), std::vector<unsigned>(N), std::vector<unsigned>(N)};
  for (int i = 0; i < N; i++) host.b[i] = mix_one(a[i], (unsigned)i);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      host.c[y * W + x] = tile_one(host.b[y * W + x], host.b[y * W + (W - 1 - x)], x, y);
  for (int base = 0; base < N; base += BLOCK) {
    unsigned sum[BLOCK], acc = 0;
    for (int t = 0; t < BLOCK; t++) sum[t] = acc += host.c[base + t];
    for (int t = 0; t < BLOCK; t++) host.d[base + t] = sum[t] ^ sum[BLOCK - 1 - t];
  }

  Buffers m{}, side{};
  for (Buffers* p : {&m, &side}) {
    cudaMalloc(&p->a, BYTES);
    cudaMalloc(&p->b, BYTES);
    cudaMalloc(&p->c, BYTES);
    cudaMalloc(&p->d, BYTES);
    cudaMemcpy(p->a, a.data(), BYTES, cudaMemcpyHostToDevice);
    cudaMemset(p->b, POISON, BYTES);
    cudaMemset(p->c, POISON, BYTES);
    cudaMemset(p->d, POISON, BYTES);
  }
  if (!cuda_ok(cudaDeviceSynchronize(), "allocation and inputs")) {
    std::printf("graph_capture: %d passed, %d failed\n", passed, failed);
    return 1;
  }

  cudaStream_t blocking, nonblocking, concurrent;
  cudaStreamCreate(&blocking);
  cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&concurrent, cudaStreamNonBlocking);

  const Capture captures[] = {
      // Before any eager launch: the kernels' (and the runtime's) first use is in a capture.
      {"global capture before any eager launch", cudaStreamCaptureModeGlobal, cudaStreamDefault,
       false, false, false},
      {"global capture, non-blocking stream", cudaStreamCaptureModeGlobal, cudaStreamNonBlocking,
       false, false, false},
      {"relaxed capture", cudaStreamCaptureModeRelaxed, cudaStreamNonBlocking, false, false, false},
      {"thread-local capture on another thread", cudaStreamCaptureModeThreadLocal,
       cudaStreamNonBlocking, false, false, true},
      {"global capture, fork-join across two streams", cudaStreamCaptureModeGlobal,
       cudaStreamNonBlocking, true, false, false},
      {"global capture with memset nodes", cudaStreamCaptureModeGlobal, cudaStreamDefault, false,
       true, false},
  };
  constexpr int CAPTURES = sizeof captures / sizeof captures[0];
  cudaGraphExec_t execs[CAPTURES] = {};
  cudaStream_t streams[CAPTURES];
  for (int i = 0; i < CAPTURES; i++)
    cudaStreamCreateWithFlags(&streams[i], captures[i].stream_flags);

  // (1) Captured before anything else ran.
  execs[0] = capture(captures[0], m, streams[0]);

  // (2) Eager reference, itself checked against the host.
  poison(m, blocking);
  pipeline(m, blocking);
  cudaError_t launch = cudaGetLastError();
  cudaError_t sync = cudaStreamSynchronize(blocking);
  cuda_ok(launch, "eager reference: launches");
  cuda_ok(sync, "eager reference: stream");
  const Result reference = copy_back(m);
  std::string diff = differs(reference, host);
  check(diff.empty(), "eager reference: %s",
        diff.empty() ? "matches the host computation" : diff.c_str());

  // (3) The first graph replayed, then the other captures made and replayed, while an eager
  // pipeline (other buffers) runs on another stream: the runtime's own work may be in flight.
  if (execs[0]) replay(captures[0], execs[0], m, streams[0], reference);
  pipeline(side, concurrent);
  for (int i = 1; i < CAPTURES; i++) {
    if (captures[i].other_thread) {
      std::thread t([&, i] { execs[i] = capture(captures[i], m, streams[i]); });
      t.join();
    } else {
      execs[i] = capture(captures[i], m, streams[i]);
    }
    if (execs[i]) replay(captures[i], execs[i], m, streams[i], reference);
  }
  if (cuda_ok(cudaStreamSynchronize(concurrent), "eager launches during the captures: stream")) {
    diff = differs(copy_back(side), reference);
    check(diff.empty(), "eager launches during the captures: %s",
          diff.empty() ? "match the reference" : diff.c_str());
  }

  // (4) Eager launches after the captures: on the stream used before, on a non-blocking stream,
  // on the default stream, and next to graph replays running on another stream.
  eager("eager after captures, same stream", m, blocking, reference);
  eager("eager after captures, non-blocking stream", m, nonblocking, reference);
  eager("eager after captures, default stream", m, nullptr, reference);
  if (execs[1]) {
    poison(side, concurrent);
    for (int r = 0; r < 4; r++) {
      poison(m, streams[1]);
      cudaGraphLaunch(execs[1], streams[1]);
      pipeline(side, concurrent);
    }
    cudaError_t e = cudaGetLastError();
    cudaError_t s1 = cudaStreamSynchronize(streams[1]), s2 = cudaStreamSynchronize(concurrent);
    check(e == cudaSuccess && s1 == cudaSuccess && s2 == cudaSuccess,
          "eager next to graph replays: launches %s, streams %s, %s", cudaGetErrorName(e),
          cudaGetErrorName(s1), cudaGetErrorName(s2));
    diff = differs(copy_back(m), reference);
    check(diff.empty(), "graph replays next to eager launches: %s",
          diff.empty() ? "match the reference" : diff.c_str());
    diff = differs(copy_back(side), reference);
    check(diff.empty(), "eager launches next to graph replays: %s",
          diff.empty() ? "match the reference" : diff.c_str());
  }
  // Eager launches with no synchronisation since the last graph replay on the same stream.
  if (execs[CAPTURES - 1]) {
    cudaGraphLaunch(execs[CAPTURES - 1], streams[CAPTURES - 1]);
    eager("eager right after a replay on the same stream", m, streams[CAPTURES - 1], reference);
  }
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize at the end");

  for (int i = 0; i < CAPTURES; i++) {
    if (execs[i]) cudaGraphExecDestroy(execs[i]);
    cudaStreamDestroy(streams[i]);
  }
  std::printf("graph_capture: %d passed, %d failed\n", passed, failed);
  return failed != 0;
}
