#!/usr/bin/env bash
# GPU checks for the transformer, on a machine with an NVIDIA GPU and nvcc on PATH.
#   1. every fixture with a GPU-TEST line: transformed, built with tests/gpu/harness.cuh and run:
#      output bit-identical to the original kernel, every task exactly once, temporal and
#      spatial preemption mid-run and resumption, five preempt/resume cycles;
#   2. compute-sanitizer memcheck, racecheck and synccheck on the barrier/return fixtures;
#   3. a transformed program with its own main(), built with nvcc, linked with the runtime
#      (C ABI) and run through cupreempt::launch with no scheduler attached, and again under
#      CUPREEMPT_CHAOS (the runtime preempts and resumes its launches at random), also
#      tests/gpu/queued_launches.cu (thousands of launches queued ahead); and the same
#      program built with -DCUPREEMPT_STANDALONE (no runtime); tests/gpu/launch_errors.cu; and
#      tests/gpu/graph_capture.cu (launches captured into CUDA graphs), both through the runtime;
#      tests/gpu/context_reset.cu (a device reset between phases of launches).
# Usage: scripts/gpu-check.sh [HARNESS_DIR] [CUPREEMPT_BINARY] [RUNTIME_LIB_DIR]
#   GPU_CHECK_SUBSET=1: HARNESS_DIR holds some fixtures' harnesses only (the sanitizer runs of
#   those it lacks are skipped, not failed).
#   HARNESS_DIR: sources made by `CUPREEMPT_GPU_GENERATE=1 CUPREEMPT_GPU_OUT=DIR cargo test
#   --test gpu` (so the GPU machine needs no Rust); without it they are made here with cargo.
# Logs go to $OUT (or target/gpu-out). Exit status 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-target/gpu-out}
mkdir -p "$out"
gen=${1:-}
cli=${2:-}
if [ -z "$gen" ]; then
  gen=target/gpu-harness
  CUPREEMPT_GPU_GENERATE=1 CUPREEMPT_GPU_OUT=$gen cargo test --release --test gpu -q >/dev/null
fi
lib=${3:-}
if [ -z "$cli" ]; then
  cargo build --release --workspace -q && cli=target/release/cupreempt && lib=target/release
fi
lib=$(realpath "${lib:-target/release}")
{ nvidia-smi -L; nvcc --version | tail -n 1; date -u; } | tee "$out/device.txt"
# Harnesses call the kernels directly: launch sites in the fixtures need no runtime here.
flags="-arch=sm_90 -std=c++17 -O2 -lineinfo --extended-lambda -DCUPREEMPT_STANDALONE -I$root/cuda_support -I$root/tests/gpu"
status=0
log=$out/gpu-check.log
: >"$log"

cd "$gen"
ls *.harness*.cu | sed 's/\.cu$//' >list
# Each harness twice: with looks inside chunks (CUPREEMPT_LOOKS: chunks cut by a look give their
# rest back) and as the default build (a chunk claimed beside the command that sends its block
# away goes back). GPU_CHECK_BUILDS="looks" or "plain" for one of them.
for build in ${GPU_CHECK_BUILDS:-looks plain}; do
  case $build in
    looks) bflags="$flags -DCUPREEMPT_LOOKS" ;;
    plain) bflags="$flags" ;;
    *) echo "unknown build $build" >&2; exit 2 ;;
  esac
  echo "== harnesses, $build build" >>"$log"
  xargs -P "$(nproc)" -I{} sh -c "nvcc $bflags -o {}.$build.exe {}.cu >{}.$build.build 2>&1 || { echo 'BUILD FAILED {} ($build)'; head -30 {}.$build.build; }" <list | tee -a "$log"
  for h in $(cat list); do
    timeout -s KILL 60 "./$h.$build.exe" >>"$log" 2>&1
    rc=$?
    if [ $rc -eq 137 ]; then echo "FAIL $h, $build build (killed after 60 s)" >>"$log"; status=1
    elif [ $rc -ne 0 ]; then echo "FAIL $h, $build build (exit $rc)" >>"$log"; status=1; fi
  done
done
grep -q '^FAIL\|BUILD FAILED' "$log" && status=1

# The sanitizers run the first build's harnesses.
sanitized=$(echo ${GPU_CHECK_BUILDS:-looks plain} | cut -d' ' -f1)
for f in thread_return_before_barrier syncthreads_count cg_block_sync return_in_barrier_loop reduction_loop_after_return uniform_return_before_barrier shared_static ragged_rows_bound_loaded_before_return synchronizing_helper_after_return synchronizing_helper_in_expression synchronizing_helper_several_returns block_vote_helper_after_return warp_stride_loop_to_warp_edge loop_counter_reused_under_lane_condition; do
  # A subset's harness folder (GPU_CHECK_SUBSET=1: a few fixtures) may hold none of these;
  # a full one must hold them all.
  if [ ! -f "$f.harness0.cu" ]; then
    if [ -n "${GPU_CHECK_SUBSET:-}" ]; then
      echo "sanitizer skipped $f: not in this subset" >>"$log"
    else
      echo "sanitizer FAIL $f: no harness for it in $gen" >>"$log"; status=1
    fi
    continue
  fi
  for tool in memcheck racecheck synccheck; do
    res=$(CUPREEMPT_HARNESS_QUICK=1 timeout -s KILL 60 compute-sanitizer --tool $tool --error-exitcode 9 "./$f.harness0.$sanitized.exe" 2>&1)
    rc=$?
    echo "$res" >"$out/sanitizer-$tool-$f.txt" 2>/dev/null || true
    summary=$(echo "$res" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY" | tr '\n' ' ')
    if [ $rc -eq 0 ]; then echo "sanitizer ok   $tool $f: $summary" >>"$log"; else
      echo "sanitizer FAIL $tool $f (exit $rc): $summary" >>"$log"; status=1; fi
  done
done
cd "$root"

e2e=/tmp/cupreempt-e2e
mkdir -p $e2e
# SOURCE through `cupreempt transform` into OUT.cu, built as OUT and linked with the runtime.
# Usage: transformed_build SOURCE OUT
transformed_build() {
  "$cli" transform "$1" -o "$2.cu" 2>/dev/null &&
    nvcc -arch=sm_90 -std=c++17 -Icuda_support "$2.cu" -o "$2" -L"$lib" -lcupreempt_runtime \
      -Xlinker -rpath="$lib"
}
# OUT run with every launch preemptible (none runs the original kernel; the runtime's count of
# planned launches matches PLANNED), into OUT-all.txt, then under chaos mode (the runtime says
# it was on), into OUT-chaos.txt. Usage: preemptible_then_chaos OUT PLANNED
preemptible_then_chaos() {
  local out=$1 planned=$2
  CUPREEMPT_VERBOSE=1 CUPREEMPT_SHORT_US=0 CUPREEMPT_TRACE_SETUP=1 timeout 60 $out >$out-all.txt 2>&1 &&
    ! grep -q "launching the original" $out-all.txt &&
    grep -qE "^cupreempt: $planned$" $out-all.txt &&
    CUPREEMPT_CHAOS=7,20 timeout 60 $out >$out-chaos.txt 2>&1 &&
    grep -q "chaos mode: launches preempted" $out-chaos.txt
}
if transformed_build fixtures/multiple_kernels.cu $e2e/mk && timeout 30 $e2e/mk >>"$log" 2>&1 &&
  CUPREEMPT_VERBOSE=1 CUPREEMPT_SHORT_US=0 timeout 30 $e2e/mk >$e2e/mk-all.txt 2>&1 &&
  cat $e2e/mk-all.txt >>"$log" && ! grep -q "launching the original" $e2e/mk-all.txt &&
  grep -qE "^cupreempt: [0-9]+ launches planned: preemptible [0-9]+$" $e2e/mk-all.txt; then
  echo "PASS end-to-end multiple_kernels (transformed program through the runtime's C ABI)" >>"$log"
else
  echo "FAIL end-to-end multiple_kernels (runtime)" >>"$log"
  status=1
fi
# Rule 7 (docs/runtime.md): with no scheduler and no chaos mode, nothing can preempt a planned
# launch, and every one runs the original kernel; the program's own checks still pass.
if CUPREEMPT_VERBOSE=1 timeout 30 $e2e/mk >$e2e/mk-unscheduled.txt 2>&1 &&
  grep -qE "^cupreempt: [0-9]+ launches planned: unscheduled [0-9]+$" $e2e/mk-unscheduled.txt; then
  echo "PASS end-to-end multiple_kernels unscheduled: $(grep '^cupreempt: [0-9]' $e2e/mk-unscheduled.txt)" >>"$log"
else
  cat $e2e/mk-unscheduled.txt >>"$log"
  echo "FAIL end-to-end multiple_kernels unscheduled (every launch should run the original kernel)" >>"$log"
  status=1
fi
# Chaos mode (CUPREEMPT_CHAOS): the runtime preempts and resumes every launch at random; the
# program's own checks must still pass, and the runtime must say that chaos was on.
if CUPREEMPT_CHAOS=7,20 timeout 60 $e2e/mk >$e2e/mk-chaos.txt 2>&1 &&
  grep -q "chaos mode: launches preempted" $e2e/mk-chaos.txt; then
  echo "PASS end-to-end multiple_kernels under CUPREEMPT_CHAOS=7,20" >>"$log"
else
  cat $e2e/mk-chaos.txt >>"$log"
  echo "FAIL end-to-end multiple_kernels under CUPREEMPT_CHAOS=7,20" >>"$log"
  status=1
fi
# The compiler launcher's split units (docs/build.md, "Wrappers in a module of their own"): a
# program built through the launcher, the wrappers of its KERNELS kernels in a module of their
# own that the runtime finds by the originals' names; every launch preemptible, then under
# chaos mode. The PASS line quotes the run's lines that match SUMMARY.
# Usage: split_e2e LABEL SOURCE OUT KERNELS SUMMARY
# e2e_outcome RC LABEL SUMMARY FILES...: a check's line in the log, PASS with the lines of FILES
# that match SUMMARY where RC is 0, else FILES whole and FAIL.
e2e_outcome() {
  local rc=$1 label=$2 summary=$3
  shift 3
  if [ "$rc" = 0 ]; then
    echo "PASS $label: $(grep -h "$summary" "$@" 2>/dev/null | tr '\n' ' ')" >>"$log"
  else
    cat "$@" >>"$log" 2>/dev/null
    echo "FAIL $label" >>"$log"
    status=1
  fi
}
split_e2e() {
  local label=$1 src=$2 out=$3 kernels=$4 summary=$5
  CUPREEMPT_RUNTIME_DIR="$lib" CUPREEMPT_VERBOSE=1 "$cli" nvcc -arch=sm_90 -std=c++17 \
      "$src" -o $out >$out.build.txt 2>&1 &&
    grep -q "wrappers of $kernels kernels in a module of their own" $out.build.txt &&
    preemptible_then_chaos $out "[0-9]+ launches planned: preemptible [0-9]+"
  e2e_outcome $? "$label" "$summary" $out.build.txt $out-all.txt $out-chaos.txt
}
# whole_file_e2e LABEL SOURCE OUT PLANNED SUMMARY: SOURCE through `cupreempt transform` (one file,
# its wrappers beside the originals), every launch as PLANNED says, then under chaos.
whole_file_e2e() {
  local label=$1 src=$2 out=$3 planned=$4 summary=$5
  transformed_build "$src" $out && preemptible_then_chaos $out "$planned"
  e2e_outcome $? "$label" "$summary" $out-all.txt $out-chaos.txt
}
split_e2e "end-to-end multiple_kernels split by the launcher" fixtures/multiple_kernels.cu \
  $e2e/mk-split 2 'wrapper modules\|launches planned\|chaos mode'
# The make example through the launcher: a header's template kernel (two units) and a kernel
# launched from another unit, each unit split; the program preempts its float and axpy launches
# mid-run (CaptureLaunches, the C API) and checks every element.
mkp=$e2e/make-split
rm -rf $mkp
if CUPREEMPT_RUNTIME_DIR="$(realpath "$lib")" CUPREEMPT_VERBOSE=1 make -s -C examples/make-project \
    CUPREEMPT="$(realpath "$cli")" NVCC=nvcc BUILD=$mkp >$mkp.build.txt 2>&1 &&
  [ "$(grep -c 'in a module of their own' $mkp.build.txt)" -eq 3 ] &&
  CUPREEMPT_VERBOSE=1 timeout 60 $mkp/scale_add >$mkp.txt 2>&1 && grep -q '^PASS' $mkp.txt &&
  ! grep -q "its wrappers are not linked" $mkp.txt && [ "$(grep -c 'preempted at' $mkp.txt)" -eq 2 ]; then
  echo "PASS make example split by the launcher: $(grep 'preempted at' $mkp.txt | tr '\n' ' ')" >>"$log"
else
  cat $mkp.build.txt $mkp.txt >>"$log" 2>/dev/null
  echo "FAIL make example split by the launcher" >>"$log"
  status=1
fi
# Kernels of internal linkage in two files, of one name and signature (tests/gpu/static_kernels*.cu):
# each file's launches run its own kernel, split by the launcher (the runtime finds a wrapper
# by its original's name, which nvcc changes for such kernels between compiles), with and
# without relocatable device code, every launch preemptible.
for rdc in "" "-rdc=true"; do
  sk=$e2e/static-kernels${rdc:+-rdc}
  rm -rf $sk && mkdir -p $sk
  ok=1
  for f in static_kernels static_kernels_other; do
    CUPREEMPT_RUNTIME_DIR="$lib" CUPREEMPT_VERBOSE=1 "$cli" nvcc -arch=sm_90 -std=c++17 $rdc \
      -c tests/gpu/$f.cu -o $sk/$f.o >>$sk/build.txt 2>&1 || ok=0
  done
  if [ $ok = 1 ] && [ "$(grep -c 'wrappers of 2 kernels in a module of their own' $sk/build.txt)" -eq 2 ] &&
    CUPREEMPT_RUNTIME_DIR="$lib" "$cli" nvcc -arch=sm_90 $rdc $sk/static_kernels.o \
      $sk/static_kernels_other.o -o $sk/prog >>$sk/build.txt 2>&1 &&
    CUPREEMPT_VERBOSE=1 CUPREEMPT_SHORT_US=0 timeout 30 $sk/prog >$sk/run.txt 2>&1 &&
    ! grep -q "launching the original" $sk/run.txt &&
    grep -qE "^cupreempt: 4 launches planned: preemptible 4$" $sk/run.txt; then
    echo "PASS static kernels of two files split by the launcher ${rdc:-(whole-program)}: $(grep '^static_kernels' $sk/run.txt)" >>"$log"
  else
    cat $sk/build.txt $sk/run.txt >>"$log" 2>/dev/null
    echo "FAIL static kernels of two files split by the launcher ${rdc:-(whole-program)}" >>"$log"
    status=1
  fi
done
# Immutable tables (tests/gpu/immutable_tables.cu: static const __device__, __constant__ const,
# constexpr __device__): the launcher copies them into the wrapper module and splits the unit;
# the program checks every output.
split_e2e "immutable tables, split by the launcher" tests/gpu/immutable_tables.cu \
  $e2e/immutable_tables 2 '^immutable_tables\|launches planned\|chaos:'
# A launch macro whose kernel is a parameter (Warp's wp_launch_device shape): in the split unit
# its launches go through cupreempt::launch_any and find their wrappers by name.
split_e2e "launches of a macro's kernel parameter, split by the launcher" \
  tests/gpu/macro_parameter_launch.cu $e2e/macro_parameter_launch 3 \
  '^macro_parameter_launch\|launches planned\|chaos:'
# The same program through `cupreempt transform` (one file, its wrappers beside the originals):
# the macro's launches find their wrappers by the kernel's address (launch.cuh, register_any).
whole_file_e2e "launches of a macro's kernel parameter, one file" \
  tests/gpu/macro_parameter_launch.cu $e2e/macro_parameter_launch_whole \
  "160 launches planned: preemptible 160" '^macro_parameter_launch\|launches planned\|chaos:'
# Launches through local variables holding a kernel's address (tests/gpu/pointer_launch.cu): a
# template kernel with 64 KB of dynamic shared memory, its limit raised through the variable,
# launched through its launch type inside a dispatch macro's statements, and a pointer chosen
# at run time through launch_any; split by the launcher and through `cupreempt transform`.
split_e2e "launches through a kernel's local pointer, split by the launcher" \
  tests/gpu/pointer_launch.cu $e2e/pointer_launch 3 '^pointer_launch\|launches planned\|chaos:'
whole_file_e2e "launches through a kernel's local pointer, one file" \
  tests/gpu/pointer_launch.cu $e2e/pointer_launch_whole \
  "120 launches planned: preemptible 120" '^pointer_launch\|launches planned\|chaos:'
# A kernel with its own __launch_bounds__(1024, 1) (tests/gpu/bounded_kernels.cu): its launches
# run the capped wrapper, whose bounds are raised to 32 registers; the program checks every
# output, that the capped wrapper was chosen and its register count.
whole_file_e2e "a kernel's own launch bounds raised in its capped wrapper, one file" \
  tests/gpu/bounded_kernels.cu $e2e/bounded_kernels \
  "20 launches planned: preemptible 20" '^bounded_kernels\|launches planned\|chaos:'
# Kernels whose static shared memory fills the 48 KB (tests/gpu/full_shared_kernels.cu): the
# task loop keeps its state in dynamic shared memory, which their launches add (one of them
# with dynamic shared memory of its own, past which the state goes); through `cupreempt
# transform`, and split by the launcher (those wrappers stay in the unit's object, the two
# ordinary kernels' go to the wrapper module); a template whose instances choose, one each way
# (the static instance's wrappers go to the module too).
whole_file_e2e "kernels that fill static shared memory, the loop's state in dynamic shared memory, one file" \
  tests/gpu/full_shared_kernels.cu $e2e/full_shared \
  "60 launches planned: preemptible 60" '^full_shared_kernels\|launches planned\|chaos:'
split_e2e "kernels that fill static shared memory, split by the launcher" tests/gpu/full_shared_kernels.cu \
  $e2e/full_shared-split 3 '^full_shared_kernels\|wrapper modules\|launches planned\|chaos:'
# Predicated kernels calling synchronizing helpers of a header after their returns
# (tests/gpu/header_sync_helpers.cu): the launcher transforms the header with the unit, which
# makes the helpers' live copies; split, every launch preemptible, then chaos.
split_e2e "synchronizing helpers of a header (live copies), split by the launcher" \
  tests/gpu/header_sync_helpers.cu $e2e/header_sync 3 '^header_sync_helpers\|launches planned\|chaos:'
# Kernels whose type macro an included header defines per configuration
# (tests/gpu/type_macro_kernels.cu, `LIB_KERNEL k(...)`): split, every launch preemptible, then chaos.
split_e2e "kernels whose type macro a header defines, split by the launcher" \
  tests/gpu/type_macro_kernels.cu $e2e/type_macro 2 '^type_macro_kernels\|launches planned\|chaos:'
# A kernel template declared in one file and defined, with explicit instantiations, in another
# (tests/gpu/declared_template*.cu; `-static-global-template-stub=false`, which CUDA 13 needs for
# a template kernel of another unit): each file through `cupreempt transform`, then linked,
# every launch preemptible (the defining unit instantiates the wrappers, the launching one
# declares them weak); and split by the launcher, the outputs checked.
dt=$e2e/declared_template
rm -rf $dt && mkdir -p $dt
dtf="-arch=sm_90 -std=c++17 -static-global-template-stub=false"
"$cli" transform tests/gpu/declared_template.cu -o $dt/def.cu 2>/dev/null &&
  "$cli" transform tests/gpu/declared_template_launch.cu -o $dt/launch.cu 2>/dev/null &&
  nvcc $dtf -Icuda_support $dt/def.cu $dt/launch.cu -o $dt/prog -L"$lib" -lcupreempt_runtime \
    -Xlinker -rpath="$lib" >$dt/build.txt 2>&1 &&
  preemptible_then_chaos $dt/prog "40 launches planned: preemptible 40"
e2e_outcome $? "a declared kernel template's launches, two files" \
  '^declared_template\|launches planned\|chaos:' $dt/build.txt $dt/prog-all.txt $dt/prog-chaos.txt
dts=$e2e/declared_template_split
rm -rf $dts && mkdir -p $dts
ok=1
for f in declared_template declared_template_launch; do
  CUPREEMPT_RUNTIME_DIR="$lib" CUPREEMPT_VERBOSE=1 "$cli" nvcc $dtf -c tests/gpu/$f.cu \
    -o $dts/$f.o >>$dts/build.txt 2>&1 || ok=0
done
[ $ok = 1 ] && CUPREEMPT_RUNTIME_DIR="$lib" "$cli" nvcc -arch=sm_90 $dts/declared_template.o \
    $dts/declared_template_launch.o -o $dts/prog >>$dts/build.txt 2>&1 &&
  CUPREEMPT_VERBOSE=1 CUPREEMPT_SHORT_US=0 timeout 60 $dts/prog >$dts/run.txt 2>&1
e2e_outcome $? "a declared kernel template's launches, two files split by the launcher" \
  '^declared_template\|launches planned' $dts/build.txt $dts/run.txt
# Launches in macro bodies (fixtures/launch_in_macro_dispatch.cu): the dispatch macro's
# launches rewritten, every launch preemptible, the program's own check of every element.
lmd=$e2e/launch_in_macro_dispatch
if transformed_build fixtures/launch_in_macro_dispatch.cu $lmd &&
  CUPREEMPT_VERBOSE=1 CUPREEMPT_SHORT_US=0 timeout 30 $lmd >$lmd.txt 2>&1 &&
  ! grep -q "launching the original" $lmd.txt &&
  grep -qE "^cupreempt: 3 launches planned: preemptible 3$" $lmd.txt; then
  echo "PASS launches in macro bodies: $(grep -v '^cupreempt' $lmd.txt | tail -n 1)" >>"$log"
else
  cat $lmd.txt >>"$log" 2>/dev/null
  echo "FAIL launches in macro bodies" >>"$log"
  status=1
fi
# Objects passed by value with a host-only destructor (fixtures/by_value_param_with_host_destructor.cu):
# the program checks every slot itself; in the persistent form (every launch preemptible, each
# persistent block running many tasks, each with its own copy) and under chaos mode.
bv=$e2e/by_value
if transformed_build fixtures/by_value_param_with_host_destructor.cu $bv; then
  for mode in "CUPREEMPT_PREEMPTIBLE=1 CUPREEMPT_SETUP=wait CUPREEMPT_SHORT_US=0 CUPREEMPT_VERBOSE=1" \
    "CUPREEMPT_CHAOS=7,20"; do
    if env $mode timeout 60 $bv >$bv.txt 2>&1 && ! grep -q "launching the original" $bv.txt; then
      echo "PASS end-to-end by_value_param_with_host_destructor ($mode): $(grep 'slots wrong' $bv.txt)" >>"$log"
    else
      cat $bv.txt >>"$log"
      echo "FAIL end-to-end by_value_param_with_host_destructor ($mode)" >>"$log"
      status=1
    fi
  done
else
  echo "FAIL end-to-end by_value_param_with_host_destructor (build)" >>"$log"
  status=1
fi
# Thousands of launches queued faster than the GPU runs them (tests/gpu/queued_launches.cu):
# under chaos the driver's command queue fills behind a preempted launch; the program must
# finish within the timeout with the original's output, and chaos must have preempted.
ql=$e2e/queued_launches
if nvcc -arch=sm_90 -std=c++17 tests/gpu/queued_launches.cu -o $ql-orig &&
  timeout 60 $ql-orig >$ql-orig.txt 2>&1 &&
  transformed_build tests/gpu/queued_launches.cu $ql &&
  CUPREEMPT_CHAOS=7,20 CUPREEMPT_VERBOSE=1 timeout 120 $ql >$ql.txt 2>&1 &&
  grep "^queued_launches:" $ql.txt | diff $ql-orig.txt - >>"$log" &&
  grep -qE "^cupreempt: chaos: [0-9]+ launches, [1-9][0-9]* preemptions" $ql.txt; then
  echo "PASS end-to-end queued_launches under CUPREEMPT_CHAOS=7,20: $(grep -E '^(queued_launches|cupreempt: chaos):' $ql.txt | grep -v 'so far' | tr '\n' ';')" >>"$log"
else
  tail -5 $ql.txt >>"$log"
  echo "FAIL end-to-end queued_launches under CUPREEMPT_CHAOS=7,20" >>"$log"
  status=1
fi
if nvcc -arch=sm_90 -std=c++17 -DCUPREEMPT_STANDALONE -Icuda_support $e2e/mk.cu -o $e2e/mk-standalone &&
  timeout 30 $e2e/mk-standalone >>"$log" 2>&1; then
  echo "PASS end-to-end multiple_kernels (CUPREEMPT_STANDALONE, no runtime)" >>"$log"
else
  echo "FAIL end-to-end multiple_kernels (standalone)" >>"$log"
  status=1
fi
if nvcc -arch=sm_90 -std=c++17 tests/gpu/launch_errors.cu -o $e2e/le-orig &&
  timeout 30 $e2e/le-orig >$e2e/le-orig.txt 2>&1 &&
  transformed_build tests/gpu/launch_errors.cu $e2e/le && timeout 30 $e2e/le >$e2e/le.txt 2>&1 && diff $e2e/le-orig.txt $e2e/le.txt >>"$log"; then
  echo "PASS launch errors: the transformed program reports what the original does: $(tr '\n' ';' <$e2e/le.txt)" >>"$log"
else
  echo "FAIL launch errors: $(cat $e2e/le-orig.txt $e2e/le.txt 2>&1 | tr '\n' ';')" >>"$log"
  status=1
fi
# A device reset between phases of launches (tests/gpu/context_reset.cu): the new primary
# context, at the old one's address, gets a runtime of its own; every launch of every phase
# computes what the original computes, unscheduled, every launch preemptible, and under chaos.
if nvcc -arch=sm_90 -std=c++17 tests/gpu/context_reset.cu -o $e2e/cr-orig &&
  timeout 60 $e2e/cr-orig >$e2e/cr-orig.txt 2>&1 &&
  transformed_build tests/gpu/context_reset.cu $e2e/cr &&
  timeout 60 $e2e/cr >$e2e/cr.txt 2>&1 && diff $e2e/cr-orig.txt $e2e/cr.txt >>"$log" &&
  CUPREEMPT_VERBOSE=1 CUPREEMPT_SHORT_US=0 timeout 60 $e2e/cr >$e2e/cr-all.txt 2>&1 &&
  grep "^context_reset:" $e2e/cr-all.txt | diff $e2e/cr-orig.txt - >>"$log" &&
  ! grep -q "launching the original" $e2e/cr-all.txt &&
  CUPREEMPT_CHAOS=7,20 timeout 60 $e2e/cr >$e2e/cr-chaos.txt 2>&1 &&
  grep "^context_reset:" $e2e/cr-chaos.txt | diff $e2e/cr-orig.txt - >>"$log"; then
  echo "PASS device reset between launches: $(cat $e2e/cr.txt), every launch preemptible and under chaos too" >>"$log"
else
  echo "FAIL device reset between launches: $(cat $e2e/cr-orig.txt $e2e/cr.txt $e2e/cr-all.txt $e2e/cr-chaos.txt 2>&1 | tail -n 8 | tr '\n' ';')" >>"$log"
  status=1
fi
# Graph capture: launches on a capturing stream run the original kernels as graph nodes (the
# runtime says why), replays and later eager launches are bit-identical; the original passes too.
rm -f $e2e/gc*
if nvcc -arch=sm_90 -std=c++17 tests/gpu/graph_capture.cu -o $e2e/gc-orig &&
  timeout 60 $e2e/gc-orig >$e2e/gc-orig.txt 2>&1 &&
  transformed_build tests/gpu/graph_capture.cu $e2e/gc && CUPREEMPT_VERBOSE=1 CUPREEMPT_SHORT_US=0 timeout 60 $e2e/gc >$e2e/gc.txt 2>&1 &&
  grep -q "launching the original kernel: the stream is being captured into a CUDA graph" $e2e/gc.txt &&
  ! grep "launching the original" $e2e/gc.txt | grep -qv "captured into a CUDA graph"; then
  grep "^cupreempt:" $e2e/gc.txt >>"$log"
  echo "PASS graph capture: $(grep -v '^cupreempt:' $e2e/gc.txt | tail -n 1) (untransformed: $(tail -n 1 $e2e/gc-orig.txt))" >>"$log"
else
  grep -h "FAIL\|^cupreempt:" $e2e/gc-orig.txt $e2e/gc.txt 2>/dev/null | sed 's/^/  graph capture: /' >>"$log"
  echo "FAIL graph capture (untransformed: $(tail -n 1 $e2e/gc-orig.txt 2>&1); transformed: $(tail -n 1 $e2e/gc.txt 2>&1); $e2e/gc.txt)" >>"$log"
  status=1
fi
grep -vE '^  ok' "$log"
echo "gpu-check: $(grep -c '^PASS' "$log") passed, $(grep -c 'FAIL' "$log") failed"
exit $status
