// Does a stream waiting for unfinished work hold up other streams? Stream S: a spin kernel
// (~1 s), then event eS; W[0] waits for eS. Then for each j in 1..32, a fresh event recorded on
// idle stream O, W[j] waits for it and records a done event: time until it completes. Streams
// are made in the order S, O, W[0..32], so W[j] shares W[0]'s hardware queue when the driver hands
// queues out in turn (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default).
#include <cuda.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static const char* ptx = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry spin(.param .u64 n){\n.reg .u64 %r<4>;\n.reg .pred %p;\nld.param.u64 %r1,[n];\nmov.u64 %r2,%clock64;\nL: mov.u64 %r3,%clock64;\nsub.u64 %r3,%r3,%r2;\nsetp.lt.u64 %p,%r3,%r1;\n@%p bra L;\nret;\n}\n";
int main(void) {
  cuInit(0); CUdevice d; cuDeviceGet(&d, 0); CUcontext c; cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);
  CUmodule m; if (cuModuleLoadData(&m, ptx)) { printf("ptx load failed\n"); return 1; } CUfunction f; cuModuleGetFunction(&f, m, "spin");
  CUstream s, o, w[33];
  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING); cuStreamCreate(&o, CU_STREAM_NON_BLOCKING);
  for (int i = 0; i < 33; i++) cuStreamCreate(&w[i], CU_STREAM_NON_BLOCKING);
  unsigned long long cycles = 4000000000ULL; void* args[] = { &cycles };
  CUevent eS; cuEventCreate(&eS, CU_EVENT_DISABLE_TIMING);
  cuLaunchKernel(f, 1,1,1, 1,1,1, 0, s, args, 0);
  cuEventRecord(eS, s); cuStreamWaitEvent(w[0], eS, 0);
  printf("held up (j: seconds until W[j]'s wait for an idle stream completed):");
  int held = 0;
  for (int j = 1; j < 33; j++) {
    CUevent q, done; cuEventCreate(&q, CU_EVENT_DISABLE_TIMING); cuEventCreate(&done, CU_EVENT_DISABLE_TIMING);
    double t0 = now();
    cuEventRecord(q, o); cuStreamWaitEvent(w[j], q, 0); cuEventRecord(done, w[j]);
    while (cuEventQuery(done) == CUDA_ERROR_NOT_READY && now() - t0 < 0.05) usleep(50);
    double t = now() - t0;
    if (t >= 0.05) { printf(" %d", j); held++; }
  }
  printf("\n%d of 32 streams held up behind W[0]'s wait (spin still running: %s)\n", held, cuStreamQuery(s) == CUDA_ERROR_NOT_READY ? "yes" : "no");
  cuCtxSynchronize();
  return 0;
}
