// Do per-node updates of an executable graph always take effect at its next launch?
// mode 0: update, launch; 1: upload on another stream, update, launch; 2: launch (in flight), update, launch;
// 3: toggle disable/enable then update, launch. Each thread its own graph and buffer.
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static CUcontext ctx; static int mode, secs; static volatile long bad, iters;
static void* work(void* arg) {
  long id = (long)arg; cuCtxSetCurrent(ctx);
  CUstream s1, s2; cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING); cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING);
  size_t n = 1024; CUdeviceptr p; cuMemAlloc(&p, n * 4); unsigned* h = malloc(n * 4);
  CUgraph g; cuGraphCreate(&g, 0); CUgraphNode node;
  CUDA_MEMSET_NODE_PARAMS mp; memset(&mp, 0, sizeof mp); mp.dst = p; mp.elementSize = 4; mp.width = n; mp.height = 1; mp.value = 0;
  cuGraphAddMemsetNode(&node, g, 0, 0, &mp, ctx); CUgraphExec e; cuGraphInstantiate(&e, g, 0);
  time_t end = time(0) + secs; unsigned v = (unsigned)id << 24;
  while (time(0) < end) {
    v++;
    if (mode == 1) cuGraphUpload(e, s2);
    if (mode == 2) cuGraphLaunch(e, s1);
    if (mode == 3) { cuGraphNodeSetEnabled(e, node, 0); cuGraphNodeSetEnabled(e, node, 1); }
    if (mode >= 4) cuGraphNodeSetEnabled(e, node, 0);
    mp.value = v; CUresult r = cuGraphExecMemsetNodeSetParams(e, node, &mp, ctx);
    if (mode == 5) { cuGraphLaunch(e, s1); cuStreamSynchronize(s1); }
    if (mode >= 4) cuGraphNodeSetEnabled(e, node, 1);
    if (r) { fprintf(stderr, "update failed %d\n", r); exit(1); }
    if (mode == 1 && (v & 1)) cuGraphUpload(e, s2);
    cuGraphLaunch(e, s1); cuStreamSynchronize(s1); cuMemcpyDtoH(h, p, n * 4);
    if (h[0] != v || h[n - 1] != v) { if (__sync_fetch_and_add(&bad, 1) < 5) fprintf(stderr, "thread %ld: %08x, expected %08x\n", id, h[0], v); }
    __sync_fetch_and_add(&iters, 1);
  }
  return 0;
}
int main(int argc, char** argv) {
  mode = atoi(argv[1]); secs = atoi(argv[2]); cuInit(0); CUdevice d; cuDeviceGet(&d, 0); cuDevicePrimaryCtxRetain(&ctx, d);
  pthread_t t[8]; for (long i = 0; i < 8; i++) pthread_create(&t[i], 0, work, (void*)i); for (int i = 0; i < 8; i++) pthread_join(t[i], 0);
  printf("mode %d: %ld iterations, %ld stale\n", mode, iters, bad); return 0;
}
