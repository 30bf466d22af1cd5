// Included by every file that `cupreempt transform` rewrote (the line is src/vocab.rs's INCLUDE).
// Compile with -I<cupreempt>/cuda_support.
#pragma once
// A transformed file may itself be included inside another file's `extern "C" {` block: the
// headers' templates need C++ linkage.
extern "C++" {
#include "cupreempt/control.h"
#include "cupreempt/task_loop.cuh"
#include "cupreempt/launch.cuh"
}
