// Do stream callbacks of different streams wait for each other's GPU work? Stream A: a spin kernel
// (~1 s) then a callback; stream B: nothing, then a callback. Time when B's callback runs.
#include <cuda.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static double t0; static volatile double ta, tb;
static void CUDA_CB cbA(CUstream s, CUresult r, void* u) { ta = now() - t0; }
static void CUDA_CB cbB(CUstream s, CUresult r, void* u) { tb = now() - t0; }
static void CUDA_CB hA(void* u) { ta = now() - t0; }
static void CUDA_CB hB(void* u) { tb = now() - t0; }
static const char* ptx = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry spin(.param .u64 n){\n.reg .u64 %r<4>;\n.reg .pred %p;\nld.param.u64 %r1,[n];\nmov.u64 %r2,%clock64;\nL: mov.u64 %r3,%clock64;\nsub.u64 %r3,%r3,%r2;\nsetp.lt.u64 %p,%r3,%r1;\n@%p bra L;\nret;\n}\n";
int main() {
  cuInit(0); CUdevice d; cuDeviceGet(&d, 0); CUcontext c; cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);
  CUmodule m; if (cuModuleLoadData(&m, ptx)) { printf("ptx load failed\n"); return 1; } CUfunction f; cuModuleGetFunction(&f, m, "spin");
  CUstream a, b; cuStreamCreate(&a, CU_STREAM_NON_BLOCKING); cuStreamCreate(&b, CU_STREAM_NON_BLOCKING);
  unsigned long long cycles = 2000000000ULL; void* args[] = { &cycles };
  for (int mode = 0; mode < 2; mode++) {
    ta = tb = -1; t0 = now();
    cuLaunchKernel(f, 1,1,1, 1,1,1, 0, a, args, 0);
    if (mode == 0) { cuStreamAddCallback(a, cbA, 0, 0); usleep(1000); cuStreamAddCallback(b, cbB, 0, 0); }
    else { cuLaunchHostFunc(a, hA, 0); usleep(1000); cuLaunchHostFunc(b, hB, 0); }
    cuCtxSynchronize(); usleep(10000);
    printf("%s: A's callback after %.3f s, B's after %.3f s\n", mode == 0 ? "cuStreamAddCallback" : "cuLaunchHostFunc", ta, tb);
  }
  return 0;
}
