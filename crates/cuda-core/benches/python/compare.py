"""The cuda.core column of the comparison benchmark (crates/cuda-core/benches/compare): the same
loops as the Rust sides and the C program, through cuda.core 1.x as a Python user writes them.

    python3 compare.py serve CUBIN
        Loads CUBIN, makes its own objects, then answers one line per request on stdin,
        "OP COUNT BURSTS", with the host time per call in microseconds, or "-" for an OP it does
        not know. OPs: launch2, launch8, graph, pool, event (as compare.c).
    python3 compare.py first-compile SOURCE ARCH
        Prints "begin NS" once the imports are done, compiles the CUDA C++ file SOURCE to a cubin
        for ARCH (sm_XY) with cuda.core's Program, then prints "milestone NS" (CLOCK_MONOTONIC,
        the parent's clock). The interpreter's start and the imports are Python's cost, not
        cuda.core's: the parent times from "begin".
"""

import sys
import time

import numpy as np

try:
    from cuda.core import Device, EventOptions, LaunchConfig, ObjectCode, Program, ProgramOptions, launch
except ImportError:  # cuda.core before 1.0
    from cuda.core.experimental import Device, EventOptions, LaunchConfig, ObjectCode, Program, ProgramOptions, launch

MIB = 1 << 20


def monotonic_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def per_call_us(op, settle, count, bursts):
    """The loop every column runs (compare's per_call_us): `bursts` bursts of `count` calls,
    each after one untimed call and followed by an untimed `settle` (a stream sync)."""
    total = 0
    for _ in range(bursts):
        op()
        start = time.perf_counter_ns()
        for _ in range(count):
            op()
        total += time.perf_counter_ns() - start
        settle()
    return total / 1e3 / (count * bursts)


class Bench:
    """Every object the loops use, made here with cuda.core's defaults (a non-blocking stream,
    an event without timing, the device's default memory resource)."""

    def __init__(self, cubin_path):
        self.device = Device(0)
        self.device.set_current()
        self.stream = self.device.create_stream()
        with open(cubin_path, "rb") as f:
            code = ObjectCode.from_cubin(f.read())
        self.k2 = code.get_kernel("k2")
        self.k8 = code.get_kernel("k8")
        self.config = LaunchConfig(grid=1, block=32)
        # k2(float*, unsigned) and k8(float*, unsigned, int, int, float, float, long long,
        # double), with a null pointer the kernels never dereference.
        self.args2 = (np.uint64(0), np.uint32(1))
        self.args8 = self.args2 + (
            np.int32(2),
            np.int32(3),
            np.float32(4.0),
            np.float32(5.0),
            np.int64(6),
            np.float64(7.0),
        )
        self.event = self.device.create_event(EventOptions())  # without timing by default
        self.memory = self.device.memory_resource
        builder = self.stream.create_graph_builder().begin_building("thread_local")
        for _ in range(10):
            launch(builder, self.config, self.k2, *self.args2)
        self.graph = builder.end_building().complete()
        self.stream.sync()
        self.ops = {
            "launch2": self.launch2,
            "launch8": self.launch8,
            "graph": self.launch_graph,
            "pool": self.pool,
            "event": self.record_and_sync,
        }

    def launch2(self):
        launch(self.stream, self.config, self.k2, *self.args2)

    def launch8(self):
        launch(self.stream, self.config, self.k8, *self.args8)

    def launch_graph(self):
        self.graph.launch(self.stream)

    def pool(self):
        self.memory.allocate(MIB, stream=self.stream).close(self.stream)

    def record_and_sync(self):
        self.stream.record(self.event)
        self.event.sync()

    def measure(self, line):
        try:
            name, count, bursts = line.split()
            op = self.ops[name]
            count, bursts = int(count), int(bursts)
        except (KeyError, ValueError):
            return "-"
        return "%.6f" % per_call_us(op, self.stream.sync, count, bursts)


def serve(cubin_path):
    bench = Bench(cubin_path)
    for line in sys.stdin:
        print(bench.measure(line), flush=True)


def first_compile(source_path, arch):
    print("begin %d" % monotonic_ns(), flush=True)
    with open(source_path) as f:
        source = f.read()
    code = Program(source, "c++", ProgramOptions(arch=arch)).compile("cubin")
    assert len(code.code) > 0
    print("milestone %d" % monotonic_ns(), flush=True)


def main(argv):
    if len(argv) == 3 and argv[1] == "serve":
        serve(argv[2])
    elif len(argv) == 4 and argv[1] == "first-compile":
        first_compile(argv[2], argv[3])
    else:
        sys.exit("usage: compare.py serve CUBIN | first-compile SOURCE ARCH")


if __name__ == "__main__":
    main(sys.argv)
