#!/usr/bin/env bash
# Runs every test. Provisions nvcc from PyPI into target/nvcc-venv (cached between runs), so
# the tests that compile transformed fixtures really run. GPU tests skip themselves, visibly,
# where there is no GPU driver.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/nvcc-venv
stamp="$venv/.requirements"
if ! cmp -s scripts/nvcc-requirements.txt "$stamp" 2>/dev/null; then
  echo "test.sh: installing nvcc from PyPI into $venv" >&2
  rm -rf "$venv"
  mkdir -p target
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r scripts/nvcc-requirements.txt
  cp scripts/nvcc-requirements.txt "$stamp"
fi
nvcc=$(ls "$venv"/lib/python3*/site-packages/nvidia/cu13/bin/nvcc | head -n 1)
"$nvcc" --version | tail -n 2 >&2
export CUPREEMPT_NVCC="$PWD/$nvcc"

cargo test --workspace --locked "$@"
