// Do stream callbacks behind event waits wait for each other? Stream S: a spin kernel (~1 s),
// then event eS; waiter W1 waits for eS, then a callback. Stream O: event eQ at once; waiter W2
// waits for eQ, then a callback. Time when W2's callback runs (an Event::completed of each).
// mode 0: cuStreamAddCallback, 1: cuLaunchHostFunc; flags: event flags (0 or 2 = DISABLE_TIMING).
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static double t0; static volatile double ta, tb;
static void CUDA_CB cbA(CUstream s, CUresult r, void* u) { ta = now() - t0; }
static void CUDA_CB cbB(CUstream s, CUresult r, void* u) { tb = now() - t0; }
static void CUDA_CB hA(void* u) { ta = now() - t0; }
static void CUDA_CB hB(void* u) { tb = now() - t0; }
static const char* ptx = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry spin(.param .u64 n){\n.reg .u64 %r<4>;\n.reg .pred %p;\nld.param.u64 %r1,[n];\nmov.u64 %r2,%clock64;\nL: mov.u64 %r3,%clock64;\nsub.u64 %r3,%r3,%r2;\nsetp.lt.u64 %p,%r3,%r1;\n@%p bra L;\nret;\n}\n";
int main(int argc, char** argv) {
  int mode = argc > 1 ? atoi(argv[1]) : 0; unsigned flags = argc > 2 ? atoi(argv[2]) : 0;
  cuInit(0); CUdevice d; cuDeviceGet(&d, 0); CUcontext c; cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);
  CUmodule m; if (cuModuleLoadData(&m, ptx)) { printf("ptx load failed\n"); return 1; } CUfunction f; cuModuleGetFunction(&f, m, "spin");
  CUstream s, o, w1, w2;
  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING); cuStreamCreate(&o, CU_STREAM_NON_BLOCKING);
  cuStreamCreate(&w1, CU_STREAM_NON_BLOCKING); cuStreamCreate(&w2, CU_STREAM_NON_BLOCKING);
  unsigned long long cycles = 2000000000ULL; void* args[] = { &cycles };
  for (int round = 0; round < 3; round++) {
    CUevent eS, eQ; cuEventCreate(&eS, flags); cuEventCreate(&eQ, flags);
    ta = tb = -1; t0 = now();
    cuLaunchKernel(f, 1,1,1, 1,1,1, 0, s, args, 0);
    cuEventRecord(eS, s); cuStreamWaitEvent(w1, eS, 0);
    if (mode == 0) cuStreamAddCallback(w1, cbA, 0, 0); else cuLaunchHostFunc(w1, hA, 0);
    cuEventRecord(eQ, o); cuStreamWaitEvent(w2, eQ, 0);
    if (mode == 0) cuStreamAddCallback(w2, cbB, 0, 0); else cuLaunchHostFunc(w2, hB, 0);
    while (tb < 0 && now() - t0 < 5) usleep(100);
    double seen = now() - t0;
    cuCtxSynchronize(); usleep(10000);
    printf("%s flags %u round %d: slow callback after %.3f s, quick after %.3f s (seen at %.3f)\n",
           mode == 0 ? "cuStreamAddCallback" : "cuLaunchHostFunc", flags, round, ta, tb, seen);
    cuEventDestroy(eS); cuEventDestroy(eQ);
  }
  return 0;
}
