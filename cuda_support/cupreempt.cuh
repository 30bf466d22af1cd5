// Included by every file that `cupreempt transform` rewrote. Compile with -I<cupreempt>/cuda_support.
#pragma once
#include "cupreempt/control.h"
#include "cupreempt/task_loop.cuh"
#include "cupreempt/launch.cuh"
