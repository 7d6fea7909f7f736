// Raw experiment 4: thread-local captures begin/end on 3 threads (streams blocking or not, with a
// forked second stream joined back), while 5 threads record events on: 0 the legacy NULL stream,
// 1 an own blocking stream, 2 an own non-blocking stream, 3 the per-thread stream, 4 the legacy
// stream with cuStreamQuery, 5 memset on legacy, memsets on: 6 an own blocking stream, 7 the
// per-thread stream, 8 an own non-blocking stream. Crash = the driver's bug. blocking 2: the
// capturers capture their per-thread default streams (blocking ones, forked onto blocking s2).
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static CUcontext ctx; static int blocking, target, fork_join; static volatile int stop; static long ok[64], err[64]; static CUdeviceptr dbuf;
static void *capturer(void *arg) {
  long id = (long)arg; cuCtxSetCurrent(ctx); CUstream s, s2; unsigned fl = blocking ? CU_STREAM_DEFAULT : CU_STREAM_NON_BLOCKING;
  // fork 2: the forked stream is non-blocking whatever the origin; fork 3: also made afresh for
  // every capture and destroyed after its end (as a split's branches are).
  cuStreamCreate(&s, fl); cuStreamCreate(&s2, fork_join >= 2 ? CU_STREAM_NON_BLOCKING : fl);
  if (blocking == 2) s = CU_STREAM_PER_THREAD; // captures of each capturer's per-thread stream
  CUevent f, j; cuEventCreate(&f, CU_EVENT_DISABLE_TIMING); cuEventCreate(&j, CU_EVENT_DISABLE_TIMING);
  while (!stop) {
    if (cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)) { err[id]++; continue; }
    cuMemsetD8Async(dbuf + 4096 * id, 1, 4096, s);
    if (fork_join == 3) cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING);
    if (fork_join) { cuEventRecord(f, s); cuStreamWaitEvent(s2, f, 0); cuMemsetD8Async(dbuf + 4096 * (id + 32), 1, 4096, s2); cuEventRecord(j, s2); cuStreamWaitEvent(s, j, 0); }
    CUgraph g = 0; CUresult r = cuStreamEndCapture(s, &g);
    if (g) cuGraphDestroy(g);
    if (fork_join == 3) cuStreamDestroy(s2);
    if (r) err[id]++; else ok[id]++;
  }
  return 0;
}
static void *recorder(void *arg) {
  long id = (long)arg; cuCtxSetCurrent(ctx); CUstream s = 0; CUevent e; cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
  if (target == 1 || target == 6) cuStreamCreate(&s, CU_STREAM_DEFAULT); else if (target == 2 || target == 8) cuStreamCreate(&s, CU_STREAM_NON_BLOCKING); else if (target == 3 || target == 7) s = CU_STREAM_PER_THREAD;
  while (!stop) {
    CUresult r;
    if (target == 4) r = cuStreamQuery(0); else if (target == 5) r = cuMemsetD8Async(dbuf + 4096 * id, 2, 4096, 0);
    else if (target >= 6) r = cuMemsetD8Async(dbuf + 4096 * id, 2, 4096, s); else r = cuEventRecord(e, s);
    if (r && r != CUDA_ERROR_NOT_READY) err[id]++; else ok[id]++;
  }
  return 0;
}
int main(int argc, char **argv) {
  blocking = atoi(argv[1]); target = atoi(argv[2]); fork_join = atoi(argv[3]); int secs = atoi(argv[4]);
  cuInit(0); CUdevice d; cuDeviceGet(&d, 0); cuDevicePrimaryCtxRetain(&ctx, d); cuCtxSetCurrent(ctx);
  cuMemAlloc(&dbuf, 4096 * 64); pthread_t t[8];
  for (long i = 0; i < 3; i++) pthread_create(&t[i], 0, capturer, (void *)i);
  for (long i = 3; i < 8; i++) pthread_create(&t[i], 0, recorder, (void *)i);
  sleep(secs); stop = 1; for (int i = 0; i < 8; i++) pthread_join(t[i], 0);
  long co = 0, ce = 0, ro = 0, re = 0; for (int i = 0; i < 3; i++) { co += ok[i]; ce += err[i]; } for (int i = 3; i < 8; i++) { ro += ok[i]; re += err[i]; }
  printf("blocking %d target %d fork %d: captures %ld ok %ld failed; calls %ld ok %ld failed\n", blocking, target, fork_join, co, ce, ro, re);
  return 0;
}
