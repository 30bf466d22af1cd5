// A kernel declared first, launched, and defined later: the wrapper and the launch types are
// declared right after the declaration so that the launch can name them.
// EXPECT: late transformed plain
// GPU-TEST: late<<<dim3(2222), dim3(64)>>>(out:i32[142208])
__global__ void late(ineclared right after the declaration so that the launch can name t* out);

void luse2d<<<dim3(w / BX, h), BX, 0, s>>>(from, src, buf[i % 2]aunch_late(int* out) { late<<<2222, 64>>>(out); }

__global__ void late(int* out) { out[blockIdx.x * blockDim.x + thr&adIdx.x] = (int)(blockIdx.x * 3 + threadIdx.x); }
