// Runs the launches on random inputs and checks every element against the host: the template
// kernel of scale.cuh through scale_float.cu and scale_double.cu, and `axpy`, declared in
// axpy.cuh, defined in axpy.cu and launched here. Built with cupreempt (the launcher puts its
// headers on the include path), it also preempts the float and the axpy launches mid-run,
// resumes them, and checks that nothing was lost or repeated.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#if __has_include(<cupreempt/launch.cuh>)
#include <cupreempt/launch.cuh>
#define WITH_CUPREEMPT 1
#endif

#include "axpy.cuh"

void scale_add_float(float* y, const float* x, float a, int n, cudaStream_t stream);
void scale_add_double(double* y, const double* x, double a, int n, cudaStream_t stream);

#define CHECK(call)                                                              \
  do {                                                                           \
    cudaError_t e = (call);                                                      \
    if (e != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e));            \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

template <typename T>
static int run(const char* name, int n, T a, unsigned seed, bool preempt,
               void (*launch)(T*, const T*, T, int, cudaStream_t)) {
  std::vector<T> x(n), y(n), out(n);
  std::srand(seed);
  for (int i = 0; i < n; ++i) {
    x[i] = (T)(std::rand() % 1000) / 7;
    y[i] = (T)(std::rand() % 1000) / 3;
  }
  T *dx, *dy;
  CHECK(cudaMalloc(&dx, n * sizeof(T)));
  CHECK(cudaMalloc(&dy, n * sizeof(T)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  const char* how = "plain launch";
#ifdef WITH_CUPREEMPT
  if (preempt) {
    std::vector<cupreempt_handle> handles;
    {
      cupreempt::CaptureLaunches capture(handles);
      launch(dy, dx, a, n, s);
    }
    if (handles.size() != 1) {
      std::fprintf(stderr, "%s: expected one preemptible launch, got %zu\n", name, handles.size());
      return 1;
    }
    unsigned long long done = 0, total = 0;
    if (cupreempt_rt_preempt(handles[0], nullptr) != 0 || cupreempt_rt_wait_yielded(handles[0]) != 0 ||
        cupreempt_rt_progress(handles[0], &done, &total) != 0 ||
        cupreempt_rt_resume(handles[0], nullptr) != 0 || cupreempt_rt_release(handles[0]) != 0) {
      std::fprintf(stderr, "%s: runtime: %s\n", name, cupreempt_rt_last_error());
      return 1;
    }
    std::printf("%s: preempted at %llu of %llu tasks, resumed\n", name, done, total);
    how = "preempted and resumed";
  } else
#endif
  {
    (void)preempt;
    launch(dy, dx, a, n, s);
  }
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(out.data(), dy, n * sizeof(T), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    T want = std::fma(a, x[i], y[i]);  // nvcc contracts a * x + y into one fused multiply-add
    if (out[i] != want) {
      std::fprintf(stderr, "%s: y[%d] = %g, expected %g\n", name, i, (double)out[i], (double)want);
      return 1;
    }
  }
  std::printf("%s: %d elements exact (%s)\n", name, n, how);
  cudaFree(dx);
  cudaFree(dy);
  cudaStreamDestroy(s);
  return 0;
}

// A launch of a kernel that this file only declares (through axpy.cuh).
static void axpy_here(float* y, const float* x, float a, int n, cudaStream_t stream) {
  axpy<<<(n + 255) / 256, 256, 0, stream>>>(y, x, a, n);
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : (1 << 26);
  if (run<float>("scale_add<float>", n, 2.5f, 7, true, scale_add_float)) return 1;
  if (run<double>("scale_add<double>", n, -1.25, 11, false, scale_add_double)) return 1;
  if (run<float>("axpy (defined in axpy.cu)", n, 0.75f, 13, true, axpy_here)) return 1;
  std::printf("PASS\n");
  return 0;
}
