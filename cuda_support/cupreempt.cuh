// Included by every file that `cupreempt transform` rewrote (the line is src/vocab.rs's INCLUDE).
// Compile with -I<cupreempt>/cuda_support.
#pragma once
// Nothing for a host compiler alone: a transformed header may be included by host-only
// sources (a .cc file reaching a header whose CUDA code stands under `#ifdef __CUDACC__`),
// which need none of this and have no CUDA headers to read.
#if defined(__CUDACC__)
// A transformed file may be included after the program's own macros (`#define grid_x ...`):
// those named like the headers' identifiers are set aside while the headers are read, and
// restored after (tests/macro_shield.rs keeps the list complete).
#include "cupreempt/shield_begin.h"
// A transformed file may itself be included inside another file's `extern "C" {` block: the
// headers' templates need C++ linkage.
extern "C++" {
#include "cupreempt/control.h"
#include "cupreempt/task_loop.cuh"
#include "cupreempt/launch.cuh"
}
#include "cupreempt/shield_end.h"
#endif  // __CUDACC__
