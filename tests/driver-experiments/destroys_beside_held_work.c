// Which releases wait for another stream's work, and does a waiting release hold up other
// threads' asynchronous calls? One stream of the context is held by a host function for HOLD
// seconds. While it is held, a second thread makes one release (an object made before the hold,
// idle, used by nothing), and a third thread, once the release has begun, queues a memset and an
// event record on a stream of its own and synchronises nothing. Each release's duration and the
// third thread's calls' durations are printed: a release that takes about HOLD waited for the
// held stream; a memset that takes about as long was held up inside the driver by the release.
//
//   destroys_beside_held_work <release: 0-11, or -1 for all> [hold seconds, default 2]
//
// Releases: 0 cuMemFreeHost, 1 cuMemFree, 2 cuArrayDestroy, 3 cuMipmappedArrayDestroy,
// 4 cuMemPoolDestroy (an empty pool), 5 cuStreamDestroy (an idle stream), 6 cuCtxDestroy (an idle
// created context), 7 cuLibraryUnload (an unused library), 8 cuMemFreeAsync (a pool allocation,
// on an idle stream), 9 cuMemHostUnregister, 10 cuMemPoolTrimTo(0) until the reserved memory is
// 0, then cuMemPoolDestroy (a pool whose one allocation was freed and synchronised, not trimmed:
// how this crate destroys pools; prints when the reserve reached 0), 11 cuCtxSynchronize then
// cuMemFreeHost (does waiting first, with a synchronisation, spare the bystander?).
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

static const char *NAMES[] = {"cuMemFreeHost",   "cuMemFree",        "cuArrayDestroy",
                              "cuMipmappedArrayDestroy", "cuMemPoolDestroy", "cuStreamDestroy",
                              "cuCtxDestroy",    "cuLibraryUnload",  "cuMemFreeAsync",
                              "cuMemHostUnregister", "cuMemPoolTrimTo+Destroy",
                              "cuCtxSynchronize+cuMemFreeHost"};

// The smallest valid PTX: a library nothing launches from.
static const char PTX[] = ".version 7.0\n.target sm_50\n.address_size 64\n"
                          ".visible .entry nothing() { ret; }\n";

static CUcontext ctx;
static CUdevice dev;
static double hold_seconds = 2.0;
static volatile int release_begun;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void CUDA_CB hold(void *arg) {
  (void)arg;
  usleep((useconds_t)(hold_seconds * 1e6));
}

// What the release thread frees: made before the hold.
struct object {
  int kind;
  void *host;
  CUdeviceptr dptr;
  CUarray array;
  CUmipmappedArray mipmap;
  CUmemoryPool pool;
  CUstream stream;
  CUcontext context;
  CUlibrary library;
};

static void make(struct object *o) {
  switch (o->kind) {
  case 0:
  case 11: CHECK(cuMemAllocHost(&o->host, 1 << 20)); break;
  case 1: CHECK(cuMemAlloc(&o->dptr, 1 << 20)); break;
  case 2: {
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = 256, .Height = 256, .Format = CU_AD_FORMAT_FLOAT,
                                 .NumChannels = 1};
    CHECK(cuArray3DCreate(&o->array, &d));
    break;
  }
  case 3: {
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = 256, .Height = 256, .Format = CU_AD_FORMAT_FLOAT,
                                 .NumChannels = 1};
    CHECK(cuMipmappedArrayCreate(&o->mipmap, &d, 4));
    break;
  }
  case 4:
  case 10: {
    CUmemPoolProps p;
    memset(&p, 0, sizeof p);
    p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = (int)dev;
    CHECK(cuMemPoolCreate(&o->pool, &p));
    CUdeviceptr q;
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAllocFromPoolAsync(&q, 1 << 20, o->pool, s));
    CHECK(cuMemFreeAsync(q, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamDestroy(s));
    if (o->kind == 4)
      CHECK(cuMemPoolTrimTo(o->pool, 0));
    break;
  }
  case 5: CHECK(cuStreamCreate(&o->stream, CU_STREAM_NON_BLOCKING)); break;
  case 6: {
    CHECK(cuCtxCreate(&o->context, NULL, 0, dev));
    CHECK(cuCtxPopCurrent(NULL));
    break;
  }
  case 7: CHECK(cuLibraryLoadData(&o->library, PTX, NULL, NULL, 0, NULL, NULL, 0)); break;
  case 8: {
    CHECK(cuStreamCreate(&o->stream, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAllocAsync(&o->dptr, 1 << 20, o->stream));
    CHECK(cuStreamSynchronize(o->stream));
    break;
  }
  case 9: {
    o->host = aligned_alloc(4096, 1 << 20);
    CHECK(cuMemHostRegister(o->host, 1 << 20, 0));
    break;
  }
  }
}

static void release(struct object *o) {
  switch (o->kind) {
  case 0: CHECK(cuMemFreeHost(o->host)); break;
  case 1: CHECK(cuMemFree(o->dptr)); break;
  case 2: CHECK(cuArrayDestroy(o->array)); break;
  case 3: CHECK(cuMipmappedArrayDestroy(o->mipmap)); break;
  case 4: CHECK(cuMemPoolDestroy(o->pool)); break;
  case 5: CHECK(cuStreamDestroy(o->stream)); break;
  case 6: CHECK(cuCtxDestroy(o->context)); break;
  case 7: CHECK(cuLibraryUnload(o->library)); break;
  case 8: CHECK(cuMemFreeAsync(o->dptr, o->stream)); break;
  case 9: CHECK(cuMemHostUnregister(o->host)); break;
  case 11: {
    double t = now();
    CHECK(cuCtxSynchronize());
    printf("  cuCtxSynchronize took %.3f s\n", now() - t);
    CHECK(cuMemFreeHost(o->host));
    break;
  }
  case 10: {
    double t = now();
    cuuint64_t reserved = 1, first = 0;
    int tries = 0;
    while (reserved != 0 && now() - t < hold_seconds + 5) {
      CHECK(cuMemPoolTrimTo(o->pool, 0));
      CHECK(cuMemPoolGetAttribute(o->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
      if (tries++ == 0)
        first = reserved;
      if (reserved != 0)
        usleep(5000);
    }
    printf("  trim: first reserve %llu, reserve %llu after %.3f s and %d tries\n",
           (unsigned long long)first, (unsigned long long)reserved, now() - t, tries);
    CHECK(cuMemPoolDestroy(o->pool));
    break;
  }
  }
}

static double release_took;

static void *releaser(void *arg) {
  struct object *o = arg;
  CHECK(cuCtxSetCurrent(ctx));
  usleep(100 * 1000); // the held host function is running by now
  double t = now();
  release_begun = 1;
  release(o);
  release_took = now() - t;
  return NULL;
}

static double memset_took, record_took;

static void *bystander(void *arg) {
  (void)arg;
  CHECK(cuCtxSetCurrent(ctx));
  CUstream s;
  CUdeviceptr p;
  CUevent e;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemAllocAsync(&p, 1 << 20, s));
  CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CHECK(cuStreamSynchronize(s));
  while (!release_begun)
    usleep(100);
  usleep(50 * 1000); // the release is under way (or done)
  double t = now();
  CHECK(cuMemsetD32Async(p, 7, (1 << 20) / 4, s));
  memset_took = now() - t;
  t = now();
  CHECK(cuEventRecord(e, s));
  record_took = now() - t;
  CHECK(cuStreamSynchronize(s));
  CHECK(cuMemFreeAsync(p, s));
  CHECK(cuStreamSynchronize(s));
  CHECK(cuEventDestroy(e));
  CHECK(cuStreamDestroy(s));
  return NULL;
}

static void run(int kind) {
  struct object o;
  memset(&o, 0, sizeof o);
  o.kind = kind;
  make(&o);
  CUstream held;
  CHECK(cuStreamCreate(&held, CU_STREAM_NON_BLOCKING));
  release_begun = 0;
  CHECK(cuLaunchHostFunc(held, hold, NULL));
  double start = now();
  pthread_t a, b;
  pthread_create(&a, NULL, releaser, &o);
  pthread_create(&b, NULL, bystander, NULL);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  CHECK(cuStreamSynchronize(held));
  double total = now() - start;
  CHECK(cuStreamDestroy(held));
  if (kind == 8)
    CHECK(cuStreamDestroy(o.stream));
  if (kind == 9)
    free(o.host);
  printf("%-24s release %.3f s, bystander memset %.3f s, record %.3f s (hold %.1f s, total %.3f s)\n",
         NAMES[kind], release_took, memset_took, record_took, hold_seconds, total);
  fflush(stdout);
}

int main(int argc, char **argv) {
  int which = argc > 1 ? atoi(argv[1]) : -1;
  if (argc > 2)
    hold_seconds = atof(argv[2]);
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  if (which >= 0 && which <= 11) {
    run(which);
  } else {
    for (int k = 0; k <= 11; k++)
      run(k);
  }
  CHECK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
