// Included by every file that `cupreempt transform` rewrote (the line is src/vocab.rs's INCLUDE).
// Compile with -I<cupreempt>/cuda_support.
#pragma once
#include "cupreempt/control.h"
#include "cupreempt/task_loop.cuh"
#include "cupreempt/launch.cuh"
