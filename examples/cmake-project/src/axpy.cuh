// A kernel declared here and defined in axpy.cu (separate compilation): main.cu includes this
// header and launches it. Built with cupreempt, that launch goes through the preemptible
// wrapper that axpy.cu's transformed copy defines.
#pragma once
__global__ void axpy(float* y, const float* x, float a, int n);
