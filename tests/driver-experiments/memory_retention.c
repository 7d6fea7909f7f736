// Does the driver give back the device memory a workload used, once every object is released?
// Each phase makes and releases objects of one kind (from `threads` threads at once), then
// synchronises, trims the pools and graph memory, and prints how much less free device memory
// there is than before the first phase. No object outlives its phase.
//
//   memory_retention <phase: 0 all, 1 managed, 2 pool, 3 streams, 4 graphs, 5 graph memory>
//                    <threads> <rounds>
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    CUresult r_ = (x);                                                                    \
    if (r_ != CUDA_SUCCESS) {                                                             \
      const char *s_ = "?";                                                               \
      cuGetErrorName(r_, &s_);                                                            \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);                      \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static CUcontext ctx;
static CUdevice dev;
static int phase_now, rounds;

static size_t size_of(unsigned *seed) {
  // 64 KiB to 4 MiB, in 4-byte steps.
  return (65536 + (size_t)(rand_r(seed) % (4u << 20))) & ~(size_t)3;
}

static void managed(unsigned *seed, CUstream s) {
  CUdeviceptr p;
  size_t n = size_of(seed);
  CHECK(cuMemAllocManaged(&p, n, CU_MEM_ATTACH_GLOBAL));
  CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)dev};
  CHECK(cuMemPrefetchAsync(p, n, loc, 0, s));
  CHECK(cuMemsetD32Async(p, 7, n / 4, s));
  CHECK(cuStreamSynchronize(s));
  CHECK(cuMemFree(p));
}

static void pooled(unsigned *seed, CUstream s) {
  CUdeviceptr p;
  size_t n = size_of(seed);
  CHECK(cuMemAllocAsync(&p, n, s));
  CHECK(cuMemsetD32Async(p, 7, n / 4, s));
  CHECK(cuMemFreeAsync(p, s));
}

static void stream(void) {
  CUstream t;
  CHECK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamDestroy(t));
}

static void graph(unsigned *seed, CUstream s, int with_memory) {
  CUdeviceptr p;
  size_t n = size_of(seed);
  CUdeviceptr scratch = 0;
  if (!with_memory) CHECK(cuMemAllocAsync(&scratch, n, s));
  CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  if (with_memory) {
    CHECK(cuMemAllocAsync(&p, n, s));
    CHECK(cuMemsetD32Async(p, 7, n / 4, s));
    CHECK(cuMemFreeAsync(p, s));
  } else {
    CHECK(cuMemsetD32Async(scratch, 7, n / 4, s));
  }
  CUgraph g;
  CUgraphExec e;
  CHECK(cuStreamEndCapture(s, &g));
  CHECK(cuGraphInstantiate(&e, g, 0));
  CHECK(cuGraphLaunch(e, s));
  CHECK(cuGraphLaunch(e, s));
  CHECK(cuStreamSynchronize(s));
  CHECK(cuGraphExecDestroy(e));
  CHECK(cuGraphDestroy(g));
  if (!with_memory) CHECK(cuMemFreeAsync(scratch, s));
}

static void *worker(void *arg) {
  unsigned seed = (unsigned)(size_t)arg * 7919u + 1;
  CHECK(cuCtxSetCurrent(ctx));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < rounds; i++) {
    int p = phase_now;
    if (p == 0) p = 1 + rand_r(&seed) % 5;
    switch (p) {
      case 1: managed(&seed, s); break;
      case 2: pooled(&seed, s); break;
      case 3: stream(); break;
      case 4: graph(&seed, s, 0); break;
      case 5: graph(&seed, s, 1); break;
    }
  }
  CHECK(cuStreamSynchronize(s));
  CHECK(cuStreamDestroy(s));
  return NULL;
}

static size_t free_now(void) {
  CUmemoryPool pool;
  CHECK(cuCtxSynchronize());
  CHECK(cuDeviceGetDefaultMemPool(&pool, dev));
  CHECK(cuMemPoolTrimTo(pool, 0));
  CHECK(cuDeviceGraphMemTrim(dev));
  CHECK(cuCtxSynchronize());
  size_t f, t;
  CHECK(cuMemGetInfo(&f, &t));
  return f;
}

int main(int argc, char **argv) {
  int phase = argc > 1 ? atoi(argv[1]) : 0;
  int threads = argc > 2 ? atoi(argv[2]) : 8;
  rounds = argc > 3 ? atoi(argv[3]) : 500;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  // Warm up every kind once on this thread before the first measurement.
  phase_now = 0;
  rounds = 20;
  worker((void *)(size_t)99);
  rounds = argc > 3 ? atoi(argv[3]) : 500;
  size_t start = free_now();
  for (int rep = 0; rep < 3; rep++) {
    int first = phase ? phase : 0, last = phase ? phase : 5;
    for (int p = first; p <= last; p++) {
      phase_now = p;
      pthread_t th[64];
      for (int i = 0; i < threads && i < 64; i++) pthread_create(&th[i], NULL, worker, (void *)(size_t)(i + 100 * rep));
      for (int i = 0; i < threads && i < 64; i++) pthread_join(th[i], NULL);
      size_t f = free_now();
      printf("rep %d phase %d (%d threads x %d rounds): %.1f MiB less free than at the start\n", rep, p,
             threads, rounds, ((double)start - (double)f) / (1 << 20));
    }
  }
  return 0;
}
