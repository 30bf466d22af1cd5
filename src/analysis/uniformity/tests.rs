use crate::analysis::{analyze, SyncMode};
use crate::options::Options;

/// The form of a kernel `k` (declared after `file`) whose body runs `body`, returns if
/// `cond`, then synchronizes.
fn form(file: &str, params: &str, body: &str, cond: &str) -> Option<SyncMode> {
    let src = format!(
        "{file}\n__global__ void k(float* out{params}) {{\n  __shared__ float s[128];\n{body}\n  if ({cond}) return;\n  s[threadIdx.x] = out[threadIdx.x];\n  __syncthreads();\n  out[threadIdx.x] = s[0];\n}}\n"
    );
    mode_of(&src)
}

/// The form of kernel `k` in `src`.
fn mode_of(src: &str) -> Option<SyncMode> {
    let parsed = crate::parse::parse(src);
    let a = analyze(&parsed, src, &Options::default());
    a.kernels.iter().find(|k| k.site.name == "k")?.mode
}

fn varying(file: &str, params: &str, body: &str, cond: &str) {
    assert_eq!(
        form(file, params, body, cond),
        Some(SyncMode::Predicated),
        "{file} / {params} / {body} / {cond}"
    );
}

fn uniform(file: &str, params: &str, body: &str, cond: &str) {
    assert_eq!(
        form(file, params, body, cond),
        Some(SyncMode::Plain),
        "{file} / {params} / {body} / {cond}"
    );
}

#[test]
fn names_the_file_does_not_declare_are_varying() {
    varying("", "", "", "HEADER_LIMIT > 1");
    varying("", "", "  int t = TID;", "t > 5");
    varying("", "", "", "cfg::kRows > 1");
    varying("#define LIMIT (HEADER_VALUE + 1)", "", "", "LIMIT > 1");
    varying("", "", "", "Traits<float>::value > 1");
}

#[test]
fn variables_other_threads_may_write_are_varying() {
    varying("__device__ int g;", "", "", "g > 1");
    varying("__managed__ int g;", "", "", "g > 1");
    varying("__shared__ int g;", "", "", "g > 1");
    varying("int g = 3;", "", "", "g > 1");
    varying("extern const int g;", "", "", "g > 1");
    varying("const int* g = 0;", "", "", "g != 0");
    varying("volatile const int g = 3;", "", "", "g > 1");
    varying("namespace ns { __device__ int g; }", "", "", "ns::g > 1");
    varying("#define G (g)\n__device__ int g;", "", "", "G > 1");
    // Which definition applies depends on the configuration.
    varying(
        "#ifdef X\n#define IDX threadIdx.x\n#else\n#define IDX 0\n#endif",
        "",
        "  int t = IDX;",
        "t > 5",
    );
    varying(
        "",
        "",
        "#ifdef X\n#define IDX threadIdx.x\n#else\n#define IDX 0\n#endif\n  int t = IDX;",
        "t > 5",
    );
    varying("", "", "  static int c = 0;", "c > 1");
    varying("", "", "  extern __device__ int c;", "c > 1");
    varying("", ", const int& r", "", "r > 1");
    // One name, two entities: a local in a nested block does not hide the global here.
    varying(
        "__device__ int g;",
        "",
        "  { int g = 1; s[g] = 0; }",
        "g > 1",
    );
}

#[test]
fn a_shared_scalar_read_after_the_barrier_that_follows_its_write_is_uniform() {
    // `form` returns if the condition holds, then synchronizes.
    let set =
        "  __shared__ int total;\n  if (threadIdx.x == 0) total = (int)out[0];\n  __syncthreads();";
    uniform("", "", set, "total == 0");
    // Counted with a shared atomic, then a barrier.
    uniform(
        "",
        "",
        "  __shared__ unsigned c;\n  if (threadIdx.x == 0) c = 0;\n  __syncthreads();\n  if (out[threadIdx.x] > 0) atomicAdd(&c, 1u);\n  __syncthreads();",
        "c == 0",
    );
    // Without the barrier, or with a write in the same interval, threads may read different
    // values.
    varying(
        "",
        "",
        "  __shared__ int total;\n  if (threadIdx.x == 0) total = (int)out[0];",
        "total == 0",
    );
    varying(
        "",
        "",
        "  __shared__ int total;\n  __syncthreads();\n  if (threadIdx.x == 1) total = 3;",
        "total == 0",
    );
    // Its address passed on: any write may follow.
    varying(
        "__device__ void keep(int* p);",
        "",
        &format!("{set}\n  keep(&total);"),
        "total == 0",
    );
}

#[test]
fn names_proven_uniform_stay_uniform() {
    uniform("__constant__ int c;", "", "", "c > 1");
    uniform("__constant__ int* c;", "", "", "c != 0");
    uniform("const int c = 4;", "", "", "c > 1");
    uniform("static const int c = 4;", "", "", "c > 1");
    uniform("__device__ const int c = 4;", "", "", "c > 1");
    uniform("int* const c = 0;", "", "", "c != 0");
    uniform(
        "namespace ns { constexpr int N = 4; }",
        ", int n",
        "",
        "ns::N > n",
    );
    uniform("enum class E { A = 1 };", ", int n", "", "n > (int)E::A");
    uniform("enum { A = 1 };", ", int n", "", "n > A");
    uniform("", ", int n", "  enum { L = 3 };", "n > L");
    uniform("", ", int n", "", "sizeof(float) * n > 4");
    uniform("", ", int n", "", "sizeof(out[0]) * n > 4");
    uniform("", ", int n", "", "min(n, 4) > INT_MAX - warpSize");
    uniform("", ", float x", "", "sqrtf(fabsf(x)) > 2.0f");
    varying("", ", float x", "", "sqrtf((float)threadIdx.x) > x");
    uniform(
        "#define TILE (sizeof(float) * 16)",
        ", int n",
        "",
        "TILE > n",
    );
    uniform(
        "constexpr int kRows = 3;\n#define ROWS (kRows * 2u)",
        "",
        "",
        "ROWS > blockDim.x",
    );
    uniform("#define B blockDim.x", "", "", "B > 64");
    uniform("#define B 4\n#define B 4", ", int n", "", "n > B");
    uniform(
        "",
        ", int n",
        "  int m = n * 2;\n#define M (m + 1)",
        "M > 5",
    );
    // A parameter hides a global of the same name in the whole body.
    uniform("__device__ int n;", ", int n", "", "n > 1");
}

#[test]
fn template_parameters_are_uniform() {
    let src = "template <int B, int D = B * 2>\n__global__ void k(float* out) {\n  __shared__ float s[128];\n  if (blockIdx.x * B > D) return;\n  s[threadIdx.x] = out[threadIdx.x];\n  __syncthreads();\n  out[threadIdx.x] = s[0];\n}\n";
    let parsed = crate::parse::parse(src);
    let a = analyze(&parsed, src, &Options::default());
    assert_eq!(a.kernels[0].mode, Some(SyncMode::Plain));
}

#[test]
fn loads_through_pointer_parameters_the_kernel_never_writes_are_uniform() {
    // Batched kernels: sizes and matrix pointers by the block's batch, not `const`.
    uniform("", ", int* lim", "", "lim[blockIdx.x] > 1");
    uniform("", ", int* const lim", "", "*lim > 1");
    uniform(
        "",
        ", int lim[]",
        "  int n = min(lim[blockIdx.z], 8);",
        "n > 1",
    );
    uniform("", ", float** rows", "", "rows[blockIdx.x] == 0");
    // The second level written, the first only read.
    uniform(
        "",
        ", float** rows",
        "  rows[blockIdx.y][threadIdx.x] = 1.0f;",
        "rows[blockIdx.y] == 0",
    );
    // Written by the kernel, in any way a thread could: then another block's write may land
    // between two threads' loads.
    varying(
        "",
        ", int* lim",
        "  lim[blockIdx.x + 1] = 0;",
        "lim[blockIdx.x] > 1",
    );
    varying("", ", int* lim", "  (lim[1])++;", "lim[blockIdx.x] > 1");
    varying("", ", int* lim", "  *lim = 2;", "lim[blockIdx.x] > 1");
    varying(
        "",
        ", int* lim",
        "  atomicAdd(lim, 1);",
        "lim[blockIdx.x] > 1",
    );
    varying(
        "",
        ", int* lim",
        "  atomicAdd(&lim[1], 1);",
        "lim[blockIdx.x] > 1",
    );
    varying(
        "",
        ", int* lim",
        "  int& r = lim[1];\n  r = 2;",
        "lim[blockIdx.x] > 1",
    );
    varying(
        "",
        ", int* lim",
        "  int* q = lim;\n  q[1] = 2;",
        "lim[blockIdx.x] > 1",
    );
    varying("", ", int* lim", "  lim += threadIdx.x;", "lim[0] > 1");
    varying(
        "",
        ", float** rows",
        "  rows[blockIdx.y] = 0;",
        "rows[blockIdx.y] == 0",
    );
    // Through a macro the body uses; a macro's own parameter of that name is another name.
    varying(
        "#define TOUCH(i) lim[i] = 1",
        ", int* lim",
        "  TOUCH(3);",
        "lim[blockIdx.x] > 1",
    );
    uniform(
        "#define TWICE(lim) ((lim) * 2)",
        ", int* lim",
        "  int n = TWICE(lim[blockIdx.x]);",
        "n > 1",
    );
}

#[test]
fn double_precision_math_and_complex_values_of_uniform_arguments_are_uniform() {
    uniform("", ", double x", "", "sqrt(fabs(x)) + floor(x) > 1.0");
    uniform(
        "",
        ", double re",
        "",
        "cuCreal(cuCmul(make_cuDoubleComplex(re, 1.0), make_cuDoubleComplex(2.0, re))) > 0.0",
    );
    varying("", ", double x", "", "sqrt(x + threadIdx.x) > 1.0");
}

#[test]
fn function_like_macros_of_arithmetic_give_uniform_values_of_uniform_arguments() {
    let ceil = "#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))";
    uniform(ceil, ", int n", "", "blockIdx.x >= CEIL_DIV(n, 4)");
    uniform(
        ceil,
        ", int n",
        "  int t = CEIL_DIV(n, 4);",
        "blockIdx.x >= t",
    );
    varying(
        ceil,
        ", int n",
        "",
        "blockIdx.x >= CEIL_DIV(n, threadIdx.x + 1)",
    );
    // One that reads memory, writes, or is defined twice.
    varying(
        "#define AT(p, i) ((p)[i])",
        ", float* v",
        "  v[threadIdx.x] = 1;",
        "AT(v, 0) > 1",
    );
    varying(
        "#define SET(a, b) ((a) = (b))",
        ", int n",
        "  int m = n;\n  SET(m, threadIdx.x);",
        "m > 2",
    );
    varying(
        "#ifdef WIDE\n#define HALF(a) ((a) / 4)\n#else\n#define HALF(a) (threadIdx.x)\n#endif",
        ", int n",
        "",
        "blockIdx.x >= HALF(n)",
    );
}

#[test]
fn loads_through_read_only_parameters_at_uniform_indices_are_uniform() {
    uniform("", ", const int* lim", "", "lim[blockIdx.x] > 1");
    uniform("", ", int const* __restrict__ lim", "", "*lim > 1");
    uniform("", ", const int lim[]", "", "lim[gridDim.x - 1] > 1");
    uniform("", ", const int* lim", "", "*(lim + blockIdx.y) > 1");
    uniform("struct P { int n; };", ", const P* p", "", "p->n > 1");
    uniform("", ", const int* lim", "", "__ldg(&lim[blockIdx.x]) > 1");
    uniform("", ", const int* lim", "", "__ldg(lim + blockIdx.x) > 1");
    varying("", ", const int* lim", "", "__ldg(&lim[threadIdx.x]) > 1");
    varying("", ", int* lim", "", "__ldg(&lim[blockIdx.x]) > 1");
    uniform(
        "",
        ", const int* ends",
        "  int b = blockIdx.x;\n  int len = b ? ends[b] - ends[b - 1] : ends[0];",
        "len < 2",
    );
    // The index differs between threads.
    varying("", ", const int* lim", "", "lim[threadIdx.x] > 1");
    // Memory that may change under it.
    varying("", ", const volatile int* lim", "", "lim[blockIdx.x] > 1");
    varying("", ", volatile int* lim", "", "lim[blockIdx.x] > 1");
    // One level only: the pointers it holds may point anywhere.
    varying("", ", const int** lim", "", "lim[blockIdx.x][0] > 1");
    // The pointer moved by a thread-dependent amount.
    varying(
        "",
        ", const int* lim",
        "  lim += threadIdx.x;",
        "lim[0] > 1",
    );
    // A local pointer may point at the thread's own variables.
    varying(
        "",
        ", const int* lim",
        "  int mine[2] = {(int)threadIdx.x, 0};\n  const int* p = mine;",
        "p[0] > 1",
    );
}

#[test]
fn arguments_a_function_of_the_file_takes_by_value_stay_uniform() {
    uniform(
        "__device__ int twice(int v) { return 2 * v; }",
        ", int n",
        "  int m = n;\n  out[0] = twice(m);",
        "m > 1",
    );
    uniform(
        "template <class T> __device__ T twice(const T& v) { return 2 * v; }",
        ", int n",
        "  int m = n;\n  out[0] = twice<int>(m);",
        "m > 1",
    );
    // A reference to non-const may be written; so may any argument of an unknown function,
    // or of an overload that takes it by reference.
    varying(
        "__device__ void set(int& v) { v = threadIdx.x; }",
        ", int n",
        "  int m = n;\n  set(m);",
        "m > 1",
    );
    varying("", ", int n", "  int m = n;\n  elsewhere(m);", "m > 1");
    varying(
        "__device__ void set(int v);\n__device__ void set(int& v);",
        ", int n",
        "  int m = n;\n  set(m);",
        "m > 1",
    );
    // A local functor of the same name is what the call calls.
    varying(
        "__device__ int f(int v) { return v; }",
        ", int n",
        "  int m = n;\n  auto f = [](int& v) { v = threadIdx.x; };\n  f(m);",
        "m > 1",
    );
}

#[test]
fn constants_passed_to_unknown_functions_stay_uniform() {
    // A reference or pointer to non-const cannot bind to a constant.
    uniform(
        "",
        ", int n",
        "  const int m = n;\n  elsewhere(m);",
        "m > 1",
    );
    uniform("", ", const int n", "  elsewhere(n);", "n > 1");
    uniform(
        "",
        ", int n",
        "  constexpr int m = 4;\n  elsewhere(&m);",
        "m > n",
    );
    uniform(
        "",
        ", int n",
        "  const int m = n;\n  obj.update((m));",
        "m > 1",
    );
    uniform("", ", int* const p", "  elsewhere(p);", "p != 0");
    // The pointee is constant, not the pointer; a name also declared as a variable; a
    // member (which may be `mutable`); a non-const parameter.
    varying("", ", const int* p", "  elsewhere(p);", "p != 0");
    varying(
        "",
        ", int n",
        "  const int m = n;\n  { int m = 2; elsewhere(m); s[m] = 0; }",
        "m > 1",
    );
    varying(
        "struct S { int v; };",
        ", const S s",
        "  elsewhere(s.v);",
        "s.v > 1",
    );
    varying("", ", int n", "  elsewhere(n);", "n > 1");
    // The built-in variables and their members.
    uniform(
        "",
        "",
        "  const int b = blockIdx.x;\n  elsewhere(blockIdx.x, gridDim);",
        "b > 1",
    );
    // Something else may change a volatile one.
    varying(
        "",
        ", int n",
        "  const volatile int m = n;\n  elsewhere(m);",
        "m > 1",
    );
}

#[test]
fn read_only_parameters_pointed_elsewhere_are_not() {
    // A thread's own array, written element by element (which the analysis does not follow).
    varying(
        "",
        ", const int* lim",
        "  int mine[2];\n  mine[0] = threadIdx.x;\n  lim = mine;",
        "lim[0] > 1",
    );
    // Moves within the host's buffer keep it.
    uniform("", ", const int* lim, int n", "  lim += n;", "lim[0] > 1");
    uniform(
        "",
        ", const int* lim, const int* other",
        "  lim = other + 4;",
        "lim[0] > 1",
    );
}

#[test]
fn template_parameters_passed_to_unknown_functions_stay_uniform() {
    let src = "template <int N, typename T>\n__global__ void k(T* out) {\n  __shared__ float s[128];\n  elsewhere(N);\n  if (N > 1) return;\n  s[threadIdx.x] = out[threadIdx.x];\n  __syncthreads();\n  out[threadIdx.x] = s[0];\n}\n";
    assert_eq!(mode_of(src), Some(SyncMode::Plain));
}

#[test]
fn what_a_call_cannot_write_through_an_argument_stays_uniform() {
    // An element's address hands the callee memory, not the index or the array's name.
    uniform(
        "",
        ", int n",
        "  int i = n;\n  elsewhere(&out[i]);",
        "i > 1",
    );
    uniform(
        "",
        ", int n",
        "  int i = n;\n  elsewhere(reinterpret_cast<int*>(&out[i]));",
        "i > 1",
    );
    // A conditional is written through its branches, never its condition; these are
    // temporaries or constants.
    uniform(
        "",
        ", int n",
        "  int i = n;\n  elsewhere(i > 0 ? out + i : nullptr);",
        "i > 1",
    );
    uniform(
        "",
        ", int n",
        "  const int i = n;\n  int j = n;\n  elsewhere(n > 0 ? j : i);",
        "i > 1",
    );
    // What the callee can write: the variable whose address it gets, an lvalue branch.
    varying("", ", int n", "  int i = n;\n  elsewhere(&i);", "i > 1");
    varying("", ", int n", "  int i = n;\n  elsewhere((&i));", "i > 1");
    varying(
        "",
        ", int n",
        "  const int i = n;\n  int j = n;\n  elsewhere(n > 0 ? j : i);",
        "j > 1",
    );
    varying(
        "struct P { int v; };",
        ", int n",
        "  P p{n};\n  elsewhere(&p.v);",
        "p.v > 1",
    );
}

#[test]
fn this_thread_blocks_index_and_shape_are_uniform() {
    let cg = "namespace cg = cooperative_groups;";
    uniform(
        cg,
        "",
        "  auto b = cg::this_thread_block();\n  int t = b.group_index().x + b.size();",
        "t > 1",
    );
    uniform(
        cg,
        "",
        "  cg::thread_block b = cg::this_thread_block();\n  b.sync();\n  int t = b.group_dim().x;",
        "t > 1",
    );
    uniform(cg, "", "  int t = cg::this_grid().num_blocks();", "t > 1");
    // A thread's place in it is not.
    varying(
        cg,
        "",
        "  auto b = cg::this_thread_block();\n  int t = b.thread_rank();",
        "t > 1",
    );
    varying(cg, "", "  int t = cg::this_grid().thread_rank();", "t > 1");
}

#[test]
fn a_constructor_may_write_its_arguments() {
    let s = "struct S { __device__ S(int& v) { v = threadIdx.x; } };";
    // `S w(m);` reads as a function declaration whose parameter type is `m`.
    varying(s, ", int n", "  int m = n;\n  S w(m);", "m > 1");
    varying(s, ", int n", "  int m = n;\n  S w{m};", "m > 1");
    varying(s, ", int n", "  int m = n;\n  S w = {m};", "m > 1");
    // Temporaries and constants cannot be bound to its reference.
    uniform(s, ", int n", "  int m = n;\n  S w(m + 1);", "m > 1");
    uniform(s, ", int n", "  const int m = n;\n  S w{m};", "m > 1");
    // Scalars, arrays of them and CUDA's vector types are built from values.
    uniform(
        "",
        ", int n",
        "  int m = n;\n  int a[2] = {m, m};\n  int b(m);",
        "m > 1",
    );
    uniform(
        "",
        ", int n",
        "  int m = n;\n  int2 v = {m, m};\n  dim3 g(m, m);",
        "m > 1",
    );
}

#[test]
fn a_helpers_results_from_uniform_arguments_are_uniform() {
    // Written through a reference parameter, or returned, from the block's built-ins, the
    // file's constants, the helper's own locals and other such helpers.
    uniform(
        "__device__ void at(int n, int& r) { r = blockIdx.x * n; }",
        "",
        "  int r;\n  at(8, r);",
        "r > 100",
    );
    uniform(
        "__device__ int row(int n) { return blockIdx.y * n + 1; }",
        "",
        "  int r = row(4);",
        "r > 5",
    );
    uniform(
        "__device__ int twice(int n) { return n * 2; }\n__device__ void at(int n, int& r) { r = twice(n) + gridDim.x; }",
        ", int n",
        "  int r;\n  at(n, r);",
        "r > 3",
    );
    uniform(
        "struct P { int x, y; };\n__device__ void at(const P& p, P& o) { o.x = p.x + blockIdx.x; o.y = p.y; }",
        ", P p",
        "  P o;\n  at(p, o);",
        "o.x >= p.y",
    );
    uniform(
        "#define IDX2(a, b, w) ((a) + (b) * (w))\nconstexpr int K = 4;\n__device__ void at(int& r) { r = K * IDX2(blockIdx.x, blockIdx.y, gridDim.x); }",
        "",
        "  int r;\n  at(r);",
        "r > 3",
    );
    uniform(
        "__device__ int sum3(int n) { int a[3] = {n, n + 1, n + 2}; int s = 0; for (int i = 0; i < 3; ++i) s += a[i]; return s; }",
        "",
        "  const int r = sum3(blockIdx.x);",
        "r > 3",
    );
}

#[test]
fn a_helper_that_reads_more_than_its_arguments_is_no_uniform_helper() {
    varying(
        "__device__ void at(int& r) { r = threadIdx.x; }",
        "",
        "  int r;\n  at(r);",
        "r > 3",
    );
    varying(
        "__device__ void at(const float* p, float& r) { r = p[blockIdx.x]; }",
        "",
        "  float r;\n  at(out, r);",
        "r > 1",
    );
    varying(
        "__device__ int g;\n__device__ void at(int& r) { r = g + blockIdx.x; }",
        "",
        "  int r;\n  at(r);",
        "r > 1",
    );
    varying(
        "__device__ void at(int& r) { r = other(blockIdx.x); }",
        "",
        "  int r;\n  at(r);",
        "r > 1",
    );
    varying(
        "#define LD(p, i) ((p)[i])\n__device__ void at(const float* p, float& r) { r = LD(p, blockIdx.x); }",
        "",
        "  float r;\n  at(out, r);",
        "r > 1",
    );
    varying(
        "#define TID threadIdx.x\n__device__ void at(int& r) { r = TID; }",
        "",
        "  int r;\n  at(r);",
        "r > 1",
    );
    varying(
        "__device__ void at(int& r) { int* p = &r; *p = blockIdx.x; }",
        "",
        "  int r;\n  at(r);",
        "r > 1",
    );
    varying(
        "template <int N> __device__ void at(int& r) { r = N * blockIdx.x; }",
        "",
        "  int r;\n  at<4>(r);",
        "r > 1",
    );
    // Calls are matched by name: every definition of it must be a uniform helper.
    varying(
        "__device__ void at(int& r) { r = blockIdx.x; }\n__device__ void at(int& r, int s) { r = threadIdx.x + s; }",
        "",
        "  int r;\n  at(r);",
        "r > 1",
    );
}

#[test]
fn a_uniform_helper_of_varying_arguments_or_control_is_varying() {
    let helper = "__device__ void at(int n, int& r) { r = n * 2; }";
    varying(helper, "", "  int r;\n  at(threadIdx.x, r);", "r > 3");
    varying(
        helper,
        "",
        "  int r = 0;\n  if (threadIdx.x > 3) at(8, r);",
        "r > 3",
    );
    varying(
        helper,
        "",
        "  __shared__ int v;\n  int r;\n  at(v, r);",
        "r > 3",
    );
    varying(helper, "", "  int r = threadIdx.x;\n  at(r, r);", "r > 3");
    varying(
        helper,
        "",
        "  int r;\n  at(8, r);\n  r += threadIdx.x;",
        "r > 3",
    );
}

#[test]
fn an_overload_only_declared_here_may_read_anything() {
    // `at(r, 3)` calls the overload defined in another file, which the analysis cannot read.
    varying(
        "__device__ void at(int& r, int s);\n__device__ void at(int& r) { r = blockIdx.x; }",
        "",
        "  int r;\n  at(r, 3);",
        "r > 1",
    );
    // A prototype of the definition itself changes nothing.
    uniform(
        "__device__ void at(int& r);\n__device__ void at(int& r) { r = blockIdx.x; }",
        "",
        "  int r;\n  at(r);",
        "r > 1",
    );
}

#[test]
fn an_included_function_like_macro_is_read_with_its_parameters() {
    let header = "#define IDX2(a, b, w) ((a) + (b) * (w))\n";
    let src = "__device__ void at(int& r) { r = IDX2(blockIdx.x, blockIdx.y, gridDim.x); }\n\
        __global__ void k(float* out) {\n  __shared__ float s[128];\n  int r;\n  at(r);\n  if (r > 3) return;\n  \
        s[threadIdx.x] = out[threadIdx.x];\n  __syncthreads();\n  out[threadIdx.x] = s[0];\n}\n";
    let mode = |o: &Options| {
        let parsed = crate::parse::parse_with(src, &o.known_macros.definitions);
        let a = analyze(&parsed, src, o);
        a.kernels
            .iter()
            .find(|k| k.site.name == "k")
            .and_then(|k| k.mode)
    };
    let mut o = Options {
        known_macros: crate::program::IncludedMacros {
            definitions: crate::program::macro_definitions(header),
            ..Default::default()
        },
        ..Options::default()
    };
    // Its text names `a`, `b` and `w`, which are nothing without the parameter list.
    assert_eq!(mode(&o), Some(SyncMode::Predicated));
    o.known_macros.parameters = crate::program::macro_parameters(header);
    assert_eq!(
        o.known_macros.parameters,
        [(
            "IDX2".to_string(),
            vec!["a".to_string(), "b".to_string(), "w".to_string()]
        )]
    );
    assert_eq!(mode(&o), Some(SyncMode::Plain));
}

#[test]
fn a_qualified_call_is_not_the_files_uniform_helper_of_that_name() {
    let helper = "__device__ void at(int& r) { r = blockIdx.x; }";
    uniform(helper, "", "  int r;\n  at(r);", "r > 1");
    // Another namespace's `at`, which the file does not show.
    varying(helper, "", "  int r;\n  other::at(r);", "r > 1");
}

#[test]
fn a_helpers_storage_is_read_from_its_declarations_not_its_words() {
    // A name with `static` in it is no storage class; a `static` local is shared by every
    // thread.
    uniform(
        "__device__ void at(int n, int& r) { const int static_rows = n * 2; r = static_rows * blockIdx.x; }",
        "",
        "  int r;\n  at(2, r);",
        "r > 1",
    );
    varying(
        "__device__ void at(int& r) { static int k = 0; r = k + blockIdx.x; }",
        "",
        "  int r;\n  at(r);",
        "r > 1",
    );
}

#[test]
fn locals_copied_from_read_only_parameters_are_read_only() {
    uniform(
        "",
        ", const int* lim_ptr",
        "  const int* __restrict__ lim = lim_ptr;",
        "lim[blockIdx.x] > 1",
    );
    uniform(
        "#define RESTRICT __restrict__",
        ", const int* lim_ptr",
        "  const int* RESTRICT lim = lim_ptr + 2;\n  const int* row = lim + blockIdx.y;",
        "row[blockIdx.x] > 1",
    );
    // Its pointee is not const, or it is copied from memory the kernel may write.
    varying(
        "",
        ", const int* lim_ptr",
        "  int* lim = (int*)lim_ptr;",
        "lim[blockIdx.x] > 1",
    );
    varying(
        "",
        ", int* lim_ptr",
        "  const int* lim = lim_ptr;",
        "lim[blockIdx.x] > 1",
    );
    varying(
        "",
        ", const int* lim_ptr",
        "  const volatile int* lim = lim_ptr;",
        "lim[blockIdx.x] > 1",
    );
    // Pointed at the thread's own memory later, or another variable of the same name.
    varying(
        "",
        ", const int* lim_ptr",
        "  int mine[2] = {(int)threadIdx.x, 0};\n  const int* lim = lim_ptr;\n  lim = mine;",
        "lim[0] > 1",
    );
    varying(
        "",
        ", const int* lim_ptr",
        "  int mine[2] = {(int)threadIdx.x, 0};\n  { const int* lim = lim_ptr; }\n  { const int* lim = mine; }\n  const int* lim = lim_ptr;",
        "lim[0] > 1",
    );
    // The index still differs between threads.
    varying(
        "",
        ", const int* lim_ptr",
        "  const int* lim = lim_ptr;",
        "lim[threadIdx.x] > 1",
    );
}

#[test]
fn constexpr_locals_are_uniform_whatever_their_initializer_calls() {
    let src = "template <int D>\n__global__ void k(float* out, int n) {\n  __shared__ float s[128];\n  constexpr int rows = rows_for(D);\n  const int tiles = (n + rows - 1) / rows;\n  if (blockIdx.x >= tiles) return;\n  s[threadIdx.x] = out[threadIdx.x];\n  __syncthreads();\n  out[threadIdx.x] = s[0];\n}\n";
    assert_eq!(mode_of(src), Some(SyncMode::Plain));
    // Without `constexpr` the call's result may be anything.
    let plain_const = src.replace("constexpr int rows", "const int rows");
    assert_eq!(mode_of(&plain_const), Some(SyncMode::Predicated));
    // Declared under thread-dependent control, as any variable.
    let controlled = src.replace(
        "  constexpr int rows = rows_for(D);\n",
        "  int rows = 1;\n  if (threadIdx.x == 0) { constexpr int r = rows_for(D); rows = r; }\n",
    );
    assert_eq!(mode_of(&controlled), Some(SyncMode::Predicated));
}

#[test]
fn functional_casts_to_integer_types_keep_uniform_values() {
    uniform(
        "",
        ", int n",
        "  const int t = int64_t(blockIdx.x) * n / gridDim.x;",
        "t > 1",
    );
    uniform("", ", int n", "", "uint32_t(blockIdx.x + n) > 4");
    varying(
        "",
        ", int n",
        "  const int t = int64_t(threadIdx.x) * n;",
        "t > 1",
    );
}

/// Kernel `k` whose body is `body` around `RETURN_AND_BARRIER` (a return if `blockIdx.x >= n`,
/// then a barrier).
fn around_the_return(body: &str) -> Option<SyncMode> {
    let tail = "  if (blockIdx.x >= n) return;\n  s[threadIdx.x] = out[threadIdx.x];\n  __syncthreads();\n  out[threadIdx.x] = s[0];\n";
    let src = format!(
        "__global__ void k(float* out, int n) {{\n  __shared__ float s[128];\n{}\n}}\n",
        body.replace("RETURN_AND_BARRIER", tail)
    );
    mode_of(&src)
}

#[test]
fn writes_in_another_preprocessor_branch_do_not_reach_a_read() {
    // Only one branch is compiled: `unused(n)` may write `n`, but not where the return is.
    let plain = Some(SyncMode::Plain);
    let predicated = Some(SyncMode::Predicated);
    assert_eq!(
        around_the_return("#if defined(FAST)\nRETURN_AND_BARRIER#else\n  unused(n);\n#endif"),
        plain
    );
    assert_eq!(
        around_the_return("#ifdef FAST\nRETURN_AND_BARRIER#elif defined(SLOW)\n  unused(n);\n#else\n  n = threadIdx.x;\n#endif"),
        plain
    );
    // The same branch, a conditional nested in it, or outside every conditional: it may
    // (predicated, or refused where the barrier stands inside the conditional, CP004).
    assert_ne!(
        around_the_return(
            "#if defined(FAST)\n  unused(n);\nRETURN_AND_BARRIER#else\n  unused(n);\n#endif"
        ),
        plain
    );
    assert_ne!(
        around_the_return(
            "#if defined(FAST)\n#ifdef CHECKED\n  unused(n);\n#endif\nRETURN_AND_BARRIER#endif"
        ),
        plain
    );
    assert_ne!(
        around_the_return("  unused(n);\n#if defined(FAST)\nRETURN_AND_BARRIER#endif"),
        plain
    );
    // Through a variable written outside the conditional from the branch's value: the chain
    // is compiled together with the read.
    assert_eq!(
        around_the_return("  int m = 0;\n#ifdef FAST\n  m = n;\n#else\n  m = threadIdx.x;\n#endif\n  if (m > 3) return;\nRETURN_AND_BARRIER"),
        predicated
    );
}

#[test]
fn a_uniform_helper_writes_out_pointers_as_it_writes_references() {
    let helper = "__device__ void place(int n, int* r, int* c) {\n  int i = 0;\n  for (int a = 0; a < n; a++)\n    for (int b = 0; b <= a; b++) {\n      if (i == blockIdx.y) { *r = a; *c = b; return; }\n      i++;\n    }\n}";
    uniform(
        helper,
        ", int n",
        "  int r = 0, c = 0;\n  place(n, &r, &c);",
        "r != c",
    );
    // What it writes through the pointer differs between threads, or it reads through it, or
    // hands it on: none of those is a uniform helper.
    varying(
        &helper.replace("*r = a;", "*r = a + threadIdx.x;"),
        ", int n",
        "  int r = 0, c = 0;\n  place(n, &r, &c);",
        "r != c",
    );
    varying(
        &helper.replace("*r = a;", "*r = *c + a;"),
        ", int n",
        "  int r = 0, c = 0;\n  place(n, &r, &c);",
        "r != c",
    );
    varying(
        &helper.replace("*r = a;", "elsewhere(r);"),
        ", int n",
        "  int r = 0, c = 0;\n  place(n, &r, &c);",
        "r != c",
    );
    // The local's earlier value still counts where the helper may not write it.
    varying(
        helper,
        ", int n",
        "  int r = threadIdx.x, c = 0;\n  place(n, &r, &c);",
        "r != c",
    );
}

#[test]
fn reference_parameters_a_function_only_reads_leave_the_argument_uniform() {
    let body = "  int kk = 4;\n  use_kk(kk, out);";
    // Read in a loop bound, an index, a condition, a cast, by a helper that reads threadIdx
    // and memory (no uniform helper): the call writes nothing.
    uniform(
        "__device__ void use_kk(int& kk, float* o) { for (int k = 0; k < kk; k++) { if (kk) { o[threadIdx.x] += (float)kk; } } }",
        "",
        body,
        "kk > 1",
    );
    uniform(
        "#define BOUND(x) ((x) + kk)\n__device__ float use_kk(int& kk, float* o) { return o[(threadIdx.x + kk) & 3] + BOUND(1); }",
        "",
        body,
        "kk > 1",
    );
    // Written, handed on, aliased, its address taken, or written by a macro or a lambda, with
    // a thread's value: varying.
    for def in [
        "__device__ void use_kk(int& kk, float* o) { kk += threadIdx.x; }",
        "__device__ void bump(int& v) { v = threadIdx.x; }\n__device__ void use_kk(int& kk, float* o) { bump(kk); }",
        "__device__ void use_kk(int& kk, float* o) { int& r = kk; r = threadIdx.x; }",
        "__device__ void use_kk(int& kk, float* o) { int* p = &kk; *p = threadIdx.x; }",
        "#define RESET kk = threadIdx.x\n__device__ void use_kk(int& kk, float* o) { RESET; }",
        "__device__ void use_kk(int& kk, float* o) { auto f = [&] { kk = threadIdx.x; }; f(); }",
        // Only declared here: its body is unknown.
        "__device__ void use_kk(int& kk, float* o);",
    ] {
        varying(def, "", body, "kk > 1");
    }
}

#[test]
fn a_type_in_parentheses_before_an_operand_is_a_cast() {
    // The grammar reads `(real)(p.f)[i]` as a call of `(real)` with `p.f`, which a call may
    // write through a reference; as a cast it writes nothing.
    let file = "struct P { const float* f; int n; };\ntypedef float real_t;";
    uniform(
        file,
        ", P p",
        "  typedef float real;\n  if (threadIdx.x < 7) out[0] = (real)(p.f)[threadIdx.x];",
        "p.n > 1",
    );
    uniform(
        file,
        ", P p",
        "  if (threadIdx.x < 7) out[0] = (real_t)(p.f)[threadIdx.x];",
        "p.n > 1",
    );
    uniform(
        &format!("{file}\nusing index_t = int;"),
        ", P p",
        "  int b = (index_t)(blockIdx.x);",
        "b > 1",
    );
    // Not a type: a call through a parenthesized name, which may write `p`.
    varying(
        file,
        ", P p",
        "  if (threadIdx.x < 7) out[0] = (convert)(p.f)[threadIdx.x];",
        "p.n > 1",
    );
    varying(file, "", "  int b = (convert)(blockIdx.x);", "b > 1");
}

#[test]
fn a_loop_heads_variable_is_its_own() {
    // The second loop's `i`, counted only where `threadIdx.x < 32`, is another variable than
    // the barrier loop's: that loop's rounds stay the same in every thread.
    let kernel = |second: &str| {
        format!(
            "__global__ void k(float* out, const int* flag) {{
  __shared__ float s[512];
  if (flag[threadIdx.x] > 0) return;
  const int tid = threadIdx.x;
  s[tid] = out[tid];
  __syncthreads();
  for (int i = blockDim.x >> 1; i >= 64; i >>= 1) {{
    if (tid < i) s[tid] += s[tid + i];
    __syncthreads();
  }}
  float v = s[tid];
  if (tid < 32) {{
    {second}
  }}
  out[tid] = v;
}}
"
        )
    };
    assert_eq!(
        mode_of(&kernel(
            "for (int i = 16; i > 0; i >>= 1) v += __shfl_down_sync(0xffffffff, v, i);"
        )),
        Some(SyncMode::Predicated)
    );
    // The same name written where it is the barrier loop's own variable: refused.
    assert_eq!(
        mode_of(&kernel("for (int j = 16; j > 0; j >>= 1) v += j;").replace(
            "for (int i = blockDim.x >> 1; i >= 64; i >>= 1) {\n    if (tid < i) s[tid] += s[tid + i];",
            "for (int i = blockDim.x >> 1; i >= 64; i >>= 1) {\n    if (tid < i) s[tid] += s[tid + i];\n    if (tid == 0) i -= 0;"
        )),
        None
    );
}

#[test]
fn a_range_for_reference_aliases_its_range() {
    // `e` is the loop's own variable and an alias of `a`'s elements: a call that may write `e`
    // may write `a`, and a write to an element of `a` reaches `e`.
    // A reference to a loop's own variable: a call that may write the reference may write it.
    let src = "__global__ void k(float* out) {
  __shared__ float s[128];
  for (int i = 0; i < 4; ++i) {
    int& r = i;
    elsewhere(r);
    if (i == 2) return;
  }
  s[threadIdx.x] = out[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = s[0];
}
";
    assert_eq!(mode_of(src), Some(SyncMode::Predicated));
    varying(
        "",
        "",
        "  int a[4] = {1, 2, 3, 4};\n  int b = 0;\n  for (auto& e : a) { a[0] = threadIdx.x; b += e; }",
        "b > 1",
    );
    // Each round reads an element: as a load is, varying.
    varying(
        "",
        "",
        "  int a[4] = {1, 2, 3, 4};\n  int b = 0;\n  for (auto e : a) { b += e; }",
        "b > 1",
    );
}

#[test]
fn element_macro_text() {
    use super::subscript_text;
    assert!(subscript_text("sAB[(j)*sldab + (i)]"));
    assert!(subscript_text(" (A[i][j]) "));
    assert!(!subscript_text("(x)"));
    assert!(!subscript_text("a[i] = 0"));
    assert!(!subscript_text("a[i] + b[j]"));
    assert!(!subscript_text("f(i)[j]"));
    assert!(!subscript_text("3[a]"));
    assert!(!subscript_text("a[i"));
}

#[test]
fn element_macro_assignment_writes_memory() {
    // The loop's `j` stays uniform through `sA(tx, j) = v` and `&sA(0, j)`; a macro that
    // stands for a local (`#define ROW(i) j`) still writes it.
    let body = |m: &str, write: &str| {
        format!(
            "{m}\n__global__ void k(float* out, int n, int lda) {{\n  extern __shared__ float sA[];\n  if (threadIdx.y >= n) return;\n  int j = 0;\n  for (; j < n; j++) {{\n    {write}\n    __syncthreads();\n  }}\n}}\n"
        )
    };
    let element = "#define S(i, j) sA[(j) * lda + (i)]";
    assert_eq!(
        mode_of(&body(element, "S(threadIdx.x, j) = 1.0f;")),
        Some(SyncMode::Predicated)
    );
    assert_eq!(
        mode_of(&body(element, "float* c = &S(threadIdx.x, j); *c = 0.0f;")),
        Some(SyncMode::Predicated)
    );
    assert_eq!(
        mode_of(&body("#define S(i, v) v", "S(0, j) = threadIdx.x;")),
        None
    );
}

#[test]
fn reference_read_through_element_macro() {
    // `j`, a reference parameter, appears only as an element macro's index (and in the macro's
    // text as its parameter): the helper reads it, and the caller's loop counter stays uniform.
    // A macro whose text names the variable itself and writes it still counts as a write.
    let src = |m: &str, use_j: &str| {
        format!(
            "{m}\n__device__ void col(int& j, float* sA, int ld, float* out) {{\n  out[threadIdx.x] = {use_j};\n}}\n__global__ void k(float* out, int n, int ld) {{\n  extern __shared__ float sA[];\n  if (threadIdx.y >= n) return;\n  for (int j = 0; j < n; j++) {{\n    col(j, sA, ld, out);\n    __syncthreads();\n  }}\n}}\n"
        )
    };
    assert_eq!(
        mode_of(&src(
            "#define sA(i, j) sA[(j) * ld + (i)]",
            "sA(threadIdx.x, j)"
        )),
        Some(SyncMode::Predicated)
    );
    assert_eq!(mode_of(&src("#define BUMP(v) (v += 1)", "BUMP(j)")), None);
}

#[test]
fn loads_through_fields_of_a_parameter_struct_the_kernel_never_writes_are_uniform() {
    let file = "struct P { const int* begin; int* end; int* count; int dims[4]; };";
    // Pointer and array fields of a struct passed by value, read at a uniform index.
    uniform(
        file,
        ", P p",
        "",
        "p.begin[blockIdx.x] == p.end[blockIdx.x]",
    );
    uniform(file, ", P p", "", "blockIdx.y >= p.dims[2]");
    // Another field written, passed to an atomic or cast: this one keeps its elements.
    uniform(
        file,
        ", P p",
        "  p.count[blockIdx.x] = 1;\n  atomicMax(p.count, 2);\n  int* c = reinterpret_cast<int*>(p.count);",
        "p.end[blockIdx.x] == 0",
    );
    // The field's own elements written: another block's write may land between two loads.
    varying(
        file,
        ", P p",
        "  p.end[blockIdx.x + 1] = 0;",
        "p.end[blockIdx.x] == 0",
    );
    // The field handed on (a callee may write through it), or the object itself.
    varying(
        file,
        ", P p",
        "  elsewhere(p.end);",
        "p.end[blockIdx.x] == 0",
    );
    varying(file, ", P p", "  elsewhere(p);", "p.end[blockIdx.x] == 0");
    // A pointer to the struct is no copy of the host's values.
    varying(file, ", P* p", "", "p->end[blockIdx.x] == 0");
}

#[test]
fn atomics_and_value_casts_write_no_argument() {
    // The address and the operand go by value: the variables passed stay as they were.
    uniform(
        "",
        ", int* count, int n",
        "  int m = n;\n  atomicAdd(count, m);\n  atomicCAS_block(count, m, 1);",
        "m > 1",
    );
    uniform(
        "",
        ", int n",
        "  int m = n;\n  float f = static_cast<float>(m);",
        "m > 1",
    );
    // A cast to a reference may hand the variable on to be written.
    varying(
        "",
        ", int n",
        "  int m = n;\n  elsewhere(const_cast<int&>(m));",
        "m > 1",
    );
    // Any other unknown function may still write what it is given.
    varying(
        "",
        ", int n",
        "  int m = n;\n  atomicAddSomething(m);",
        "m > 1",
    );
}
