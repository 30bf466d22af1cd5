// Included by every file that `cupreempt transform` rewrote (the line is src/vocab.rs's INCLUDE).
// Compile with -I<cupreempt>/cuda_support.
#pragma once
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
