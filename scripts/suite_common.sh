# Sourced by the suite scripts (external-suite.sh, makefile-suite.sh) from the repository root,
# with $2 and $3 their optional CUPREEMPT_BINARY and RUNTIME_LIB_DIR.
# Sets cli and lib (building cupreempt and the runtime with cargo when no binary is given), and
# prints the header of a run: when, on what, with which settings.
suite_binaries() {
  cli=${1:-}
  lib=${2:-}
  if [ -z "$cli" ]; then
    cargo build --release -p cupreempt -p cupreempt-runtime -q
    cli=target/release/cupreempt
    lib=target/release
  fi
  lib=${lib:-$(dirname "$cli")}
}

# suite_header NAME CHECKOUT: the checkout's commit under NAME, and the environment the
# programs run under (the runtime's and CUDA's settings), so that a table says it.
suite_header() {
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo none)"
  echo "nvcc: $(nvcc --version | tail -n 1)"
  if [ -d "$2/.git" ]; then
    echo "$1: $(git -C "$2" rev-parse --short HEAD)"
  else
    echo "$1: $2 (not a git checkout)"
  fi
  env | grep -E '^(CUPREEMPT_|CUDA_MODULE_LOADING=|CUDA_DEVICE_MAX_CONNECTIONS=|EXT_|NVCC_(APPEND|PREPEND)_FLAGS=)' | sort |
    sed 's/^/environment: /' || true
}
