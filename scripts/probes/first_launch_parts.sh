#!/usr/bin/env bash
# Where a program's first-launch time goes once it is transformed, for a program of one .cu file
# (plus .cpp files) that prints its own timing, such as the CUDA samples' template (which times
# allocation, copies and one launch from right after its context is made). Builds, from a copy of
# the program's folder, with nvcc -O3 -arch=sm_90:
#   original     the program as it is
#   lib          the same, run with the runtime library preloaded (LD_PRELOAD): what the library's
#                threads (setup, early loading's polling, page warming) cost the program
#   module       the transformed file, every `cupreempt::launch<K__cupreempt_kernels>(...)(...)`
#                turned back into `K<<<...>>>(...)`, built with -DCUPREEMPT_STANDALONE (no
#                runtime): the original kernel launched from the transformed module (its wrappers
#                loaded with it), nothing else
#   transformed  the transformed file linked with the runtime, as a user builds it
#   transformed, CUPREEMPT_PRELOAD=0  the same without early loading
# and runs the forms alternately, PROBE_RUNS times each (default 15), under CUDA's default lazy
# module loading, then again with CUDA_MODULE_LOADING=EAGER (every module loaded when the context
# is made, before the program's clock starts). Prints the median of each timing value the program
# prints (external_suite.py's rules) per form and mode.
# Usage: scripts/probes/first_launch_parts.sh PROGRAM_DIR COMMON_INCLUDE_DIR [BIN_DIR]
#   e.g. SAMPLES/Samples/0_Introduction/template SAMPLES/Common .gpu
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
dir=$(realpath "$1") common=$(realpath "$2") bin=$(realpath "${3:-target/release}")
work=$(mktemp -d)
cp -r "$dir"/. "$work/src"
cd "$work/src"
cu=$(ls ./*.cu | head -1)
cpp=$(ls ./*.cpp 2>/dev/null || true)
flags=(-O3 -std=c++17 -arch=sm_90 -I"$common" -I.)
nvcc "${flags[@]}" "$cu" $cpp -o "$work/original"
"$bin/cupreempt" transform "$cu" -o "$work/t.cu" 2>/dev/null
cp "$work/t.cu" ./transformed.cu
nvcc "${flags[@]}" -I"$root/cuda_support" ./transformed.cu $cpp -L "$bin" -Xlinker -rpath \
  -Xlinker "$bin" -lcupreempt_runtime -o "$work/transformed"
sed -E 's/cupreempt::launch<([A-Za-z0-9_]+)__cupreempt_kernels>\(([^;]*)\)\(([^;]*)\);/\1<<<\2>>>(\3);/' \
  "$work/t.cu" >./module.cu
if grep -q 'cupreempt::launch<' ./module.cu; then
  echo "module: some launches were not turned back (launch split over lines?); form left out"
  rm -f ./module.cu
else
  nvcc "${flags[@]}" -DCUPREEMPT_STANDALONE -I"$root/cuda_support" ./module.cu $cpp -o "$work/module"
fi
runs=${PROBE_RUNS:-15}
for mode in LAZY EAGER; do
  for _ in $(seq "$runs"); do
    for form in original lib module transformed preload0; do
      case $form in
        lib) exe=$work/original env=(LD_PRELOAD="$bin/libcupreempt_runtime.so") ;;
        preload0) exe=$work/transformed env=(CUPREEMPT_PRELOAD=0) ;;
        *) exe=$work/$form env=() ;;
      esac
      [ -x "$exe" ] || continue
      printf '%s %s ' "$mode" "$form"
      (cd "$work/src" && env CUDA_MODULE_LOADING=$mode "${env[@]}" "$exe" 2>&1 </dev/null || true) |
        python3 -c '
import json, sys
sys.path.insert(0, sys.argv[1])
import external_suite as ext
print(json.dumps({k: v[0] for k, v in ext.timings(sys.stdin.read()).items()}))' "$root/scripts"
    done
  done
done | python3 -c '
import collections, json, statistics, sys
vals = collections.defaultdict(list)
for line in sys.stdin:
    mode, form, data = line.split(" ", 2)
    for k, v in json.loads(data).items():
        vals[(mode, k, form)].append(v)
for (mode, key, form), v in sorted(vals.items()):
    print(f"{mode:5s} {key[:60]:60s} {form:11s} median {statistics.median(v):.4f} (n {len(v)}, {min(v):.4f}-{max(v):.4f})")'
