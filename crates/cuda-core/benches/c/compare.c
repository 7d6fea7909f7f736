/* The C column of the comparison benchmark (crates/cuda-core/benches/compare): the same loops as
 * the Rust sides, written as a C program against the driver API and NVRTC would write them.
 *
 * Built on the GPU machine by the bench bundle's run.sh:
 *   gcc -O2 -Wall -Wextra compare.c -I$CUDA/include -L$CUDA/lib64 -L$CUDA/lib64/stubs \
 *       -Wl,-rpath,$CUDA/lib64 -lnvrtc -lcuda -o compare_c
 * (the stub libcuda.so only resolves the link: at run time the driver's libcuda.so.1 loads.)
 *
 *   compare_c serve CUBIN
 *     Loads CUBIN, makes its own objects, then answers one line per request on stdin,
 *     "OP COUNT BURSTS", with the host time per call in microseconds, or "-" for an OP it does
 *     not know. OPs: launch2, launch8, graph, pool, event.
 *   compare_c first-compile SOURCE ARCH
 *     Compiles the CUDA C++ file SOURCE to a cubin for ARCH (sm_XY) with NVRTC, then prints
 *     "milestone NS" (CLOCK_MONOTONIC, the parent's clock) once the cubin is in memory.
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void fail(const char *call, const char *what, int line)
{
    fprintf(stderr, "compare_c: line %d: %s failed: %s\n", line, call, what);
    exit(1);
}

static void check_cu(CUresult status, const char *call, int line)
{
    const char *name = "unknown error";
    if (status == CUDA_SUCCESS)
        return;
    cuGetErrorName(status, &name);
    fail(call, name, line);
}

static void check_nvrtc(nvrtcResult status, const char *call, int line)
{
    if (status != NVRTC_SUCCESS)
        fail(call, nvrtcGetErrorString(status), line);
}

#define CU(call) check_cu((call), #call, __LINE__)
#define NVRTC(call) check_nvrtc((call), #call, __LINE__)

static unsigned long long monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

/* The whole file SOURCE, NUL-terminated. */
static char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    char *data;
    long n;
    if (!f || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
        fail("fopen", path, __LINE__);
    data = malloc((size_t)n + 1);
    if (!data || fread(data, 1, (size_t)n, f) != (size_t)n)
        fail("fread", path, __LINE__);
    data[n] = '\0';
    fclose(f);
    *size = (size_t)n;
    return data;
}

/* Everything the loops use, made here with the flags a C program would use. */
struct bench {
    CUstream stream;   /* cuStreamCreate(CU_STREAM_NON_BLOCKING) */
    CUfunction k2, k8; /* from cuModuleLoadData of the parent's cubin */
    CUgraphExec graph; /* 10 launches of k2, captured and instantiated here */
    CUevent event;     /* cuEventCreate(CU_EVENT_DISABLE_TIMING) */
    /* The kernels' arguments: k2(float*, unsigned), k8(float*, unsigned, int, int, float,
     * float, long long, double), with a null pointer the kernels never dereference. */
    CUdeviceptr x;
    unsigned n;
    int a, b;
    float c, d;
    long long e;
    double f;
    void *args2[2], *args8[8];
};

static void launch(struct bench *b, CUfunction f, void **args)
{
    CU(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, b->stream, args, NULL));
}

static void op_launch2(struct bench *b) { launch(b, b->k2, b->args2); }
static void op_launch8(struct bench *b) { launch(b, b->k8, b->args8); }
static void op_graph(struct bench *b) { CU(cuGraphLaunch(b->graph, b->stream)); }

/* 1 MiB from the device's default pool, as the driver configures it (release threshold 0). */
static void op_pool(struct bench *b)
{
    CUdeviceptr p;
    CU(cuMemAllocAsync(&p, 1 << 20, b->stream));
    CU(cuMemFreeAsync(p, b->stream));
}

static void op_event(struct bench *b)
{
    CU(cuEventRecord(b->event, b->stream));
    CU(cuEventSynchronize(b->event));
}

typedef void (*op_fn)(struct bench *);

/* The loop every column runs (measure.rs's per_call_us): BURSTS bursts of COUNT calls, each
 * burst after one untimed call (so it starts from the state its calls leave: a pool holding
 * memory again after a synchronisation released it) and followed by an untimed stream
 * synchronisation. Inlined, so each OP's loop is the plain loop a C programmer writes. */
static inline __attribute__((always_inline)) double per_call_us(struct bench *b, op_fn op, long count,
                                                                long bursts)
{
    unsigned long long total = 0;
    for (long i = 0; i < bursts; i++) {
        unsigned long long start;
        op(b);
        start = monotonic_ns();
        for (long j = 0; j < count; j++)
            op(b);
        total += monotonic_ns() - start;
        CU(cuStreamSynchronize(b->stream));
    }
    return (double)total / 1e3 / (double)(count * bursts);
}

static double measure(struct bench *b, const char *name, long count, long bursts)
{
    if (strcmp(name, "launch2") == 0)
        return per_call_us(b, op_launch2, count, bursts);
    if (strcmp(name, "launch8") == 0)
        return per_call_us(b, op_launch8, count, bursts);
    if (strcmp(name, "graph") == 0)
        return per_call_us(b, op_graph, count, bursts);
    if (strcmp(name, "pool") == 0)
        return per_call_us(b, op_pool, count, bursts);
    if (strcmp(name, "event") == 0)
        return per_call_us(b, op_event, count, bursts);
    return -1.0;
}

static void setup(struct bench *b, const char *cubin_path)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CUgraph graph;
    size_t size;
    char *cubin = read_file(cubin_path, &size);
    memset(b, 0, sizeof *b);
    b->n = 1, b->a = 2, b->b = 3, b->c = 4.0f, b->d = 5.0f, b->e = 6, b->f = 7.0;
    b->args2[0] = &b->x, b->args2[1] = &b->n;
    b->args8[0] = &b->x, b->args8[1] = &b->n, b->args8[2] = &b->a, b->args8[3] = &b->b;
    b->args8[4] = &b->c, b->args8[5] = &b->d, b->args8[6] = &b->e, b->args8[7] = &b->f;

    CU(cuInit(0));
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuStreamCreate(&b->stream, CU_STREAM_NON_BLOCKING));
    CU(cuModuleLoadData(&module, cubin));
    free(cubin);
    CU(cuModuleGetFunction(&b->k2, module, "k2"));
    CU(cuModuleGetFunction(&b->k8, module, "k8"));
    CU(cuEventCreate(&b->event, CU_EVENT_DISABLE_TIMING));
    CU(cuStreamBeginCapture(b->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int i = 0; i < 10; i++)
        op_launch2(b);
    CU(cuStreamEndCapture(b->stream, &graph));
    CU(cuGraphInstantiate(&b->graph, graph, 0));
    CU(cuStreamSynchronize(b->stream));
}

static int serve(const char *cubin_path)
{
    struct bench b;
    char line[256], name[32];
    long count, bursts;
    setup(&b, cubin_path);
    while (fgets(line, sizeof line, stdin)) {
        double us = -1.0;
        if (sscanf(line, "%31s %ld %ld", name, &count, &bursts) == 3 && count > 0 && bursts > 0)
            us = measure(&b, name, count, bursts);
        if (us < 0)
            printf("-\n");
        else
            printf("%.6f\n", us);
        fflush(stdout);
    }
    return 0;
}

static int first_compile(const char *source_path, const char *arch)
{
    nvrtcProgram prog;
    char option[64];
    const char *options[1] = {option};
    size_t size;
    char *cubin, *source = read_file(source_path, &size);
    snprintf(option, sizeof option, "--gpu-architecture=%s", arch);
    NVRTC(nvrtcCreateProgram(&prog, source, "compare.cu", 0, NULL, NULL));
    NVRTC(nvrtcCompileProgram(prog, 1, options));
    NVRTC(nvrtcGetCUBINSize(prog, &size));
    cubin = malloc(size);
    if (!cubin)
        fail("malloc", "out of memory", __LINE__);
    NVRTC(nvrtcGetCUBIN(prog, cubin));
    printf("milestone %llu\n", monotonic_ns());
    fflush(stdout);
    NVRTC(nvrtcDestroyProgram(&prog));
    free(cubin);
    free(source);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "serve") == 0)
        return serve(argv[2]);
    if (argc == 4 && strcmp(argv[1], "first-compile") == 0)
        return first_compile(argv[2], argv[3]);
    fprintf(stderr, "usage: %s serve CUBIN | first-compile SOURCE ARCH\n", argv[0]);
    return 2;
}
