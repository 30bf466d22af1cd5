#!/usr/bin/env bash
# Where a few external-suite programs lose their time: builds them once (scripts/external-suite.sh
# with EXT_ONLY), runs the suite's comparison under each environment of VARIANTS (applied to both
# builds), then runs each transformed program once more with CUPREEMPT_VERBOSE=1 and
# CUPREEMPT_TRACE_SETUP=1 (which launches ran the original kernel and why; the runtime's setup,
# step by step). Results: $OUT/VARIANT/external.md (per-value medians in external-results.json)
# and $OUT/trace.txt.
# Usage: scripts/probes/external_variants.sh SAMPLES_DIR BIN_DIR NAMES [VARIANT...]
#   NAMES: sample names joined by | (e.g. "template|dxtc")
#   VARIANT: `default` or NAME=VALUE[,NAME=VALUE] (e.g. CUDA_MODULE_LOADING=EAGER)
set -uo pipefail
cd "$(dirname "$0")/../.."
samples=$1 bin=$(realpath "$2") only=$3
shift 3
out=${OUT:-target/external-variants}
mkdir -p "$out"
export EXT_ONLY="^($only)$" EXT_RUNS=${EXT_RUNS:-3}
skip=
for v in "${@:-default}"; do
  name=$(echo "$v" | tr ',=' '_-')
  envs=()
  [ "$v" != default ] && IFS=, read -ra envs <<<"$v"
  echo "== $v"
  env "${envs[@]}" $skip EXT_RERUN=1 OUT="$out/$name" scripts/external-suite.sh "$samples" "$bin/cupreempt" "$bin" \
    >"$out/$name.console" 2>&1
  grep -E "^(Geomean|\| )" "$out/$name/external.md" | cut -d'|' -f2,4,6-9
  skip=EXT_SKIP_BUILD=1
done
: >"$out/trace.txt"
for exe in $(find target/external/transformed/build -type f -perm -u+x | grep -E "/($only)$"); do
  echo "== $exe" >>"$out/trace.txt"
  (cd "$(dirname "$exe")" && CUPREEMPT_VERBOSE=1 CUPREEMPT_TRACE_SETUP=1 timeout 60 "./$(basename "$exe")" 2>&1 | grep -E "cupreempt|time|Time|ms" | head -40) >>"$out/trace.txt"
done
