//! Drops never wait for the GPU: each value is dropped while a host function holds the stream its
//! work is queued on, the drop must return at once (well under a second), and what the value
//! kept alive is released only once the held work is done, on the release thread.
//!
//! "Released" is observed through what the release lets go of: a graph's callback (a token its
//! closure holds), memory freed by a resource whose free is not stream-ordered (a wrapper that
//! counts its `deallocate` calls), the buffer behind a texture.

use cuda_core::graph::{CaptureMode, Graph, GraphDefinition};
use cuda_core::texture::{
    ArrayFormat, OpaqueArray, OpaqueArrayOptions, ResourceDescriptor, TextureDescriptor, TextureObject,
};
use cuda_core::{
    launch, Buffer, CodeType, Context, ContextFlags, Device, DeviceMemoryResource, EventOptions, HostAllocFlags,
    LaunchConfig, LegacyPinnedMemoryResource, MemoryResource, Program, ProgramOptions, SourceType, Stream,
    VirtualMemoryResource,
};
use cuda_sys::driver::CUdeviceptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What "at once" means: a drop that waited for the held work would take the whole hold.
const AT_ONCE: Duration = Duration::from_millis(250);
/// How long the tests keep the work held after the drop, to see nothing released meanwhile.
const HELD_AFTER_DROP: Duration = Duration::from_millis(300);

/// One test at a time: the driver runs host functions on few threads, so a gate held by one test
/// can keep another test's host functions (and so its releases) from running.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    cuda_tests::one_at_a_time()
}

fn setup() -> (Device, Stream) {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    (d, s)
}

/// A gate a host function waits at, holding its stream until the test opens it (or 30 s pass:
/// a failing test never leaves a stream held). Dropping the gate opens it.
#[derive(Clone, Default)]
struct Gate {
    open: Arc<AtomicBool>,
    /// Host functions that entered the gate, and those that left it.
    entered: Arc<AtomicUsize>,
    left: Arc<AtomicUsize>,
}

impl Gate {
    /// Holds `stream`: the work queued on it from now on waits for the gate.
    fn hold(&self, stream: &Stream) {
        let gate = self.clone();
        stream.launch_host_func(move || gate.wait()).unwrap();
    }

    fn wait(&self) {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let start = Instant::now();
        while !self.open.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.left.fetch_add(1, Ordering::SeqCst);
    }

    fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
    }

    /// The gate and `stream` as they are, for a failure's message.
    fn state(&self, stream: &Stream) -> String {
        // SAFETY: the stream is live and not capturing.
        let status = unsafe { cuda_sys::driver::cuStreamQuery(stream.handle()) };
        format!(
            "gate open: {}, host functions entered {} and left {}, the stream: {status:?}",
            self.open.load(Ordering::SeqCst),
            self.entered.load(Ordering::SeqCst),
            self.left.load(Ordering::SeqCst)
        )
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
    }
}

/// Set when dropped: held by what a graph or stream must keep alive.
struct Token(Arc<AtomicBool>);

impl Drop for Token {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn new_token() -> (Token, Arc<AtomicBool>) {
    let released = Arc::new(AtomicBool::new(false));
    (Token(released.clone()), released)
}

/// Drops `value`, and fails unless the drop returned at once.
fn drop_at_once<T>(what: &str, value: T) {
    let start = Instant::now();
    drop(value);
    let took = start.elapsed();
    assert!(took < AT_ONCE, "dropping {what} waited {took:?} for the GPU");
}

/// Checks that `released` stays false while the gate holds the work, then becomes true once it
/// is opened.
fn released_after_the_work(what: &str, gate: &Gate, released: impl Fn() -> bool) {
    std::thread::sleep(HELD_AFTER_DROP);
    assert!(
        !released(),
        "{what} was released while the work using it was still held"
    );
    gate.open();
    let start = Instant::now();
    while !released() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what} was not released after the work was done"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A resource whose free is not stream-ordered (legacy pinned memory, virtual memory: the free
/// waits for the stream), noting the frees it was asked for: on which thread, when.
struct Counted {
    inner: Arc<dyn MemoryResource>,
    frees: Mutex<Vec<(Option<String>, Instant)>>,
}

impl Counted {
    fn freed(&self) -> usize {
        self.frees.lock().unwrap().len()
    }

    /// The frees so far, for a failure's message.
    fn log(&self) -> String {
        format!("{:?}", self.frees.lock().unwrap())
    }
}

// SAFETY: every call is forwarded to a resource that keeps the contract.
unsafe impl MemoryResource for Counted {
    fn allocate(&self, size: usize, stream: &Stream) -> cuda_core::Result<CUdeviceptr> {
        self.inner.allocate(size, stream)
    }
    unsafe fn deallocate(&self, ptr: CUdeviceptr, size: usize, stream: &Stream) -> cuda_core::Result<()> {
        let thread = std::thread::current().name().map(str::to_owned);
        self.frees.lock().unwrap().push((thread, Instant::now()));
        // SAFETY: forwarded from the caller.
        unsafe { self.inner.deallocate(ptr, size, stream) }
    }
    fn is_device_accessible(&self) -> bool {
        self.inner.is_device_accessible()
    }
    fn is_host_accessible(&self) -> bool {
        self.inner.is_host_accessible()
    }
    fn device(&self) -> Option<Device> {
        self.inner.device()
    }
}

fn counted(inner: Arc<dyn MemoryResource>) -> Arc<Counted> {
    Arc::new(Counted {
        inner,
        frees: Mutex::new(Vec::new()),
    })
}

/// A graph callback that waits at `gate` (holding the stream the graph is launched on) and holds
/// `token`.
fn holding_callback(gate: &Gate, token: Token) -> impl Fn() + Send + Sync + 'static {
    let gate = gate.clone();
    move || {
        gate.wait();
        let _ = &token;
    }
}

/// An explicit graph of one callback waiting at `gate`, instantiated and launched on `s`; and
/// whether what the callback holds was released.
fn launched_held_graph(s: &Stream, gate: &Gate) -> (GraphDefinition, Graph, Arc<AtomicBool>) {
    let (token, released) = new_token();
    let definition = GraphDefinition::new().unwrap();
    definition.callback(holding_callback(gate, token)).unwrap();
    let exec = definition.instantiate(&Default::default()).unwrap();
    exec.launch(s).unwrap();
    (definition, exec, released)
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn dropping_a_launched_graph_returns_at_once() {
    let _one = one_at_a_time();
    let (_d, s) = setup();
    let gate = Gate::default();
    let (definition, exec, released) = launched_held_graph(&s, &gate);
    drop_at_once("the definition", definition);
    drop_at_once("an executable graph whose launch is held", exec);
    released_after_the_work("the graph's callback", &gate, || released.load(Ordering::SeqCst));
    s.sync().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn dropping_a_graph_definition_and_builder_returns_at_once() {
    let _one = one_at_a_time();
    let (d, s) = setup();
    // An explicit definition whose graph is launched, let go of after its executable graph: the
    // executable keeps what it runs.
    let gate = Gate::default();
    let (definition, exec, released) = launched_held_graph(&s, &gate);
    drop_at_once("its executable graph", exec);
    drop_at_once("a launched graph's definition", definition);
    released_after_the_work("the definition's callback", &gate, || released.load(Ordering::SeqCst));

    // A builder's capture, holding a buffer of a resource whose free waits for the stream.
    let gate = Gate::default();
    let (token, released) = new_token();
    let resource = counted(LegacyPinnedMemoryResource::new(HostAllocFlags::default()));
    let buffer = Buffer::allocate(resource.clone(), 1 << 16, &s).unwrap();
    let mut builder = d.create_graph_builder().unwrap();
    builder.begin_building(CaptureMode::ThreadLocal).unwrap();
    builder.callback(holding_callback(&gate, token)).unwrap();
    buffer.fill_u8(7, builder.stream()).unwrap();
    builder.end_building().unwrap();
    let exec = builder.complete(&Default::default()).unwrap();
    exec.launch(&s).unwrap();
    drop_at_once("the graph's buffer", buffer);
    drop_at_once("a graph builder whose graph's launch is held", builder);
    drop_at_once("its executable graph", exec);
    std::thread::sleep(HELD_AFTER_DROP);
    assert_eq!(
        resource.freed(),
        0,
        "freed while the graph may write it: {}",
        resource.log()
    );
    released_after_the_work("the builder's callback", &gate, || released.load(Ordering::SeqCst));
    let start = Instant::now();
    while resource.freed() == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "the buffer was never freed");
        std::thread::sleep(Duration::from_millis(2));
    }
    s.sync().unwrap();
}

/// Drops a buffer of `resource` that a copy queued behind the gate writes, and checks the drop
/// returns at once and the free waits for the copy.
fn drop_buffer_behind_the_gate(what: &str, s: &Stream, resource: Arc<Counted>) {
    let gate = Gate::default();
    let buffer = Buffer::allocate(resource.clone(), 1 << 16, s).unwrap();
    gate.hold(s);
    buffer.fill_u8(3, s).unwrap();
    drop_at_once(what, buffer);
    // The free waits on the release thread, which says so.
    assert!(
        cuda_core::pending_releases() >= 1,
        "{what}: the free waiting for the held copy is not counted by pending_releases"
    );
    released_after_the_work(what, &gate, || resource.freed() == 1);
    assert!(
        cuda_tests::releases_drain(Duration::from_secs(20)),
        "{what}: pending_releases stayed at {} after the free",
        cuda_core::pending_releases()
    );
    s.sync().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn dropping_buffers_whose_free_waits_returns_at_once() {
    let _one = one_at_a_time();
    let (d, s) = setup();
    drop_buffer_behind_the_gate(
        "a legacy pinned buffer",
        &s,
        counted(LegacyPinnedMemoryResource::new(HostAllocFlags::default())),
    );
    // Virtual memory: its free unmaps, which waits for the stream.
    let vmm = VirtualMemoryResource::new(&d, Default::default()).unwrap();
    drop_buffer_behind_the_gate("a virtual memory mapping", &s, counted(vmm));
    // Used on a second stream too: the free waits for both.
    let resource = counted(LegacyPinnedMemoryResource::new(HostAllocFlags::default()));
    let other = d.create_stream(Default::default()).unwrap();
    let buffer = Buffer::allocate(resource.clone(), 4096, &s).unwrap();
    s.sync().unwrap();
    let gate = Gate::default();
    gate.hold(&other);
    buffer.fill_u8(1, &other).unwrap();
    drop_at_once("a buffer used on a held second stream", buffer);
    released_after_the_work("a buffer used on a held second stream", &gate, || resource.freed() == 1);
    // A pool buffer: its free is queued on the stream, nothing to wait for.
    let gate = Gate::default();
    let buffer = d.allocate(1 << 20, &s).unwrap();
    gate.hold(&s);
    buffer.fill_u8(9, &s).unwrap();
    drop_at_once("a pool buffer", buffer);
    gate.open();
    s.sync().unwrap();
}

// Found by review: a buffer whose free waits for the GPU (legacy pinned memory, `cuMemFreeHost`)
// was freed at once when its own stream was idle, but such a free may wait for every stream of
// the context: a drop beside another stream's held work waited for it. Freed on the release
// thread now, whatever its stream's state.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn dropping_a_pinned_buffer_on_an_idle_stream_beside_held_work_returns_at_once() {
    let _one = one_at_a_time();
    let (d, s) = setup();
    let resource = counted(LegacyPinnedMemoryResource::new(HostAllocFlags::default()));
    let buffer = Buffer::allocate(resource.clone(), 1 << 16, &s).unwrap();
    buffer.fill_u8(2, &s).unwrap();
    s.sync().unwrap();
    // Another stream of the context is held; the buffer's own stream is idle.
    let held = d.create_stream(Default::default()).unwrap();
    let gate = Gate::default();
    gate.hold(&held);
    drop_at_once("a pinned buffer whose stream is idle", buffer);
    gate.open();
    let start = Instant::now();
    while resource.freed() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the buffer was never freed: {}",
            gate.state(&held)
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    held.sync().unwrap();
    assert!(cuda_tests::releases_drain(Duration::from_secs(20)));
}

// Found by review: a pool buffer used on another thread's per-thread default stream (which this
// thread cannot name) was freed by the dropping thread after a context-wide synchronisation, so
// the drop waited for that stream's work. The release thread waits for it instead.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn dropping_a_buffer_used_on_another_threads_per_thread_stream_returns_at_once() {
    let _one = one_at_a_time();
    let (d, s) = setup();
    let buffer = Arc::new(d.allocate(1 << 20, &s).unwrap());
    s.sync().unwrap();
    let gate = Gate::default();
    let (b, g) = (buffer.clone(), gate.clone());
    std::thread::spawn(move || {
        d.set_current().unwrap();
        let pt = Stream::per_thread_default();
        g.hold(&pt);
        b.fill_u8(4, &pt).unwrap();
    })
    .join()
    .unwrap();
    let buffer = Arc::try_unwrap(buffer).unwrap_or_else(|_| panic!("the other thread kept the buffer"));
    drop_at_once("a pool buffer used on another thread's held per-thread stream", buffer);
    assert!(
        cuda_core::pending_releases() >= 1,
        "the free waiting for the other thread's stream is not counted"
    );
    gate.open();
    assert!(
        cuda_tests::releases_drain(Duration::from_secs(20)),
        "pending_releases stayed at {}",
        cuda_core::pending_releases()
    );
    d.sync().unwrap();
}

// Found by an audit: an array destroyed by a descriptor that outlived it, a pool resource's last
// reference, and a created context were destroyed by the dropping thread; such destroys give
// memory back to the device and may wait for the work of every stream of the context. They are
// destroyed on the release thread now.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn dropping_arrays_pools_and_contexts_beside_held_work_returns_at_once() {
    let _one = one_at_a_time();
    let (d, s) = setup();
    assert!(
        cuda_tests::releases_drain(Duration::from_secs(20)),
        "an earlier test left releases"
    );
    let held = d.create_stream(Default::default()).unwrap();
    // Each destroy in a phase of its own: dropped while another stream is held, then released
    // once the gate opens (the failure names which one stayed pending).
    let phase = |what: &str, value: Box<dyn std::any::Any>, before: &str| {
        let gate = Gate::default();
        gate.hold(&held);
        drop_at_once(what, value);
        std::thread::sleep(HELD_AFTER_DROP);
        gate.open();
        held.sync().unwrap();
        assert!(
            cuda_tests::releases_drain(Duration::from_secs(20)),
            "{what}: pending_releases stayed at {} after the held work was done: {}; {before}; drop errors: {:?}",
            cuda_core::pending_releases(),
            gate.state(&held),
            cuda_core::take_drop_errors()
        );
    };
    // A descriptor holding the last reference to its array.
    let array = OpaqueArray::from_descriptor(&OpaqueArrayOptions::new([64, 64], ArrayFormat::Float32, 1)).unwrap();
    let resource = ResourceDescriptor::from_opaque_array(&array);
    drop(array);
    phase(
        "a descriptor holding the last reference to its array",
        Box::new(resource),
        "",
    );
    // A pool resource whose memory was freed.
    let pool = DeviceMemoryResource::new(&d, Default::default()).unwrap();
    let buffer = pool.allocate(1 << 20, &s).unwrap();
    buffer.fill_u8(1, &s).unwrap();
    drop(buffer);
    s.sync().unwrap();
    let before = format!(
        "before the drop the pool reserved {:?} and used {:?}",
        pool.reserved_mem_current(),
        pool.used_mem_current()
    );
    phase("a device pool's last reference", Box::new(pool), &before);
    // A created context with nothing of this crate left in it.
    let context = Context::create(&d, ContextFlags::default()).unwrap();
    d.set_current().unwrap();
    phase("a created context", Box::new(context), "");
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

/// A kernel writing `value` into one word, in code of its own.
fn marking_kernel(value: u32) -> cuda_core::Kernel {
    let source = format!(r#"extern "C" __global__ void mark(unsigned* out) {{ *out = {value}u; }}"#);
    Program::new(source.as_str(), SourceType::Cxx, ProgramOptions::default())
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap()
        .get_kernel("mark")
        .unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn dropping_code_while_other_kernels_are_queued_returns_at_once() {
    let _one = one_at_a_time();
    let (d, s) = setup();
    let other = d.create_stream(Default::default()).unwrap();
    let (held_out, done_out) = (d.allocate(4, &s).unwrap(), d.allocate(4, &other).unwrap());
    let held = marking_kernel(1);
    let gate = Gate::default();
    gate.hold(&s);
    // SAFETY: mark writes one word of a one-word buffer; `held` (its code) is kept until the
    // stream has passed the launch (the sync below).
    unsafe { launch(&s, &LaunchConfig::new(1, 1), &held, (&held_out,)) }.unwrap();
    // Code whose kernel has run, dropped while another library's kernel waits behind the gate:
    // unloading it (on the release thread) never holds the dropping thread.
    let done = marking_kernel(2);
    // SAFETY: as above; `other` is synchronised before `done` is dropped.
    unsafe { launch(&other, &LaunchConfig::new(1, 1), &done, (&done_out,)) }.unwrap();
    other.sync().unwrap();
    drop_at_once("code whose kernel has run, while other work is held", done);
    std::thread::sleep(HELD_AFTER_DROP);
    gate.open();
    let opened = Instant::now();
    s.sync().unwrap();
    let synced = opened.elapsed();
    assert_eq!(held_out.to_vec::<u32>(&s).unwrap(), [1]);
    assert_eq!(done_out.to_vec::<u32>(&other).unwrap(), [2]);
    assert!(
        cuda_tests::releases_drain(Duration::from_secs(20)),
        "the code was not unloaded 20 s after the held work was let go (the stream synced after {synced:?})"
    );
    assert!(
        opened.elapsed() < Duration::from_secs(10),
        "the held work took {synced:?} to finish once let go, the unload {:?}",
        opened.elapsed()
    );
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn dropping_a_stream_or_an_event_with_held_work_returns_at_once() {
    let _one = one_at_a_time();
    let (d, _) = setup();
    let s = d.create_stream(Default::default()).unwrap();
    let gate = Gate::default();
    let (token, released) = new_token();
    gate.hold(&s);
    s.launch_host_func(move || {
        let _ = &token;
    })
    .unwrap();
    let event = d.create_event(EventOptions::default()).unwrap();
    s.record(&event).unwrap();
    drop_at_once("an event recorded behind held work", event);
    drop_at_once("a stream with held work", s);
    released_after_the_work("the stream's host function", &gate, || released.load(Ordering::SeqCst));
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn dropping_a_texture_in_use_returns_at_once() {
    let _one = one_at_a_time();
    let (d, s) = setup();
    let code = Program::new(
        r#"extern "C" __global__ void fetch(cudaTextureObject_t tex, float* out, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) out[i] = tex1Dfetch<float>(tex, i);
        }"#,
        SourceType::Cxx,
        ProgramOptions {
            arch: Some(format!("sm_{}", d.arch().unwrap())),
            ..Default::default()
        },
    )
    .unwrap()
    .compile(CodeType::Cubin, &[])
    .unwrap();
    let fetch = code.get_kernel("fetch").unwrap();
    let n = 256usize;
    let resource = counted(LegacyPinnedMemoryResource::new(HostAllocFlags::default()));
    let data = Buffer::allocate(resource.clone(), n * 4, &s).unwrap();
    data.copy_from_host(&vec![2.5f32; n], &s).unwrap();
    let linear = ResourceDescriptor::from_linear(data, ArrayFormat::Float32, 1, None).unwrap();
    let tex = TextureObject::from_descriptor(&linear, &TextureDescriptor::default()).unwrap();
    drop(linear);
    let out = d.allocate(n * 4, &s).unwrap();
    let fetch_all = |tex: &TextureObject| {
        // SAFETY: fetch(tex, float*, int) reads n texels and writes n floats of `out`.
        unsafe { launch(&s, &LaunchConfig::new(1, n as u32), &fetch, (tex, &out, n as i32)) }.unwrap();
    };
    // The first launch loads the kernel into the context (lazy loading), which waits for the
    // context's work: done before the gate holds the stream.
    fetch_all(&tex);
    s.sync().unwrap();
    let gate = Gate::default();
    gate.hold(&s);
    fetch_all(&tex);
    let launched = gate.state(&s);
    drop_at_once("a texture a held kernel reads", tex);
    let dropped = Instant::now();
    std::thread::sleep(HELD_AFTER_DROP);
    assert_eq!(
        resource.freed(),
        0,
        "the texture's memory was freed while the kernel reading it was held (dropped at {dropped:?}; after the launch {launched}; now {}): {}",
        gate.state(&s),
        resource.log()
    );
    released_after_the_work("the texture's memory", &gate, || resource.freed() == 1);
    assert_eq!(
        out.to_vec::<f32>(&s).unwrap(),
        vec![2.5f32; n],
        "the kernel read the texture"
    );
}

// Round 3, finding 10: an owned managed pool destroyed while its last free was still queued
// crashed the driver (SIGSEGV in cuMemPoolDestroy, driver 580). A pool made here is destroyed
// once the frees queued into it have run, never by the thread that dropped it while they are
// pending. Every kind of pool the crate makes, with the free held behind a host function.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn a_pool_dropped_with_its_last_free_pending_waits_for_it() {
    use cuda_core::{DeviceMemoryResource, ManagedMemoryResource, ManagedMemoryResourceOptions, PinnedMemoryResource};
    let _serial = one_at_a_time();
    let (d, s) = setup();
    let kinds: Vec<&str> = if d.properties().concurrent_managed_access().unwrap_or(0) != 0 {
        vec!["device", "pinned", "managed"]
    } else {
        cuda_tests::skip_part("the managed pool: no concurrent managed access on this device");
        vec!["device", "pinned"]
    };
    for kind in kinds {
        for round in 0..4 {
            let gate = Gate::default();
            let (buffer, resource, pool): (Buffer, Box<dyn std::any::Any>, cuda_sys::driver::CUmemoryPool) = match kind
            {
                "device" => {
                    let mr = DeviceMemoryResource::new(&d, Default::default()).unwrap();
                    (mr.allocate(1 << 20, &s).unwrap(), Box::new(mr.clone()), mr.handle())
                }
                "pinned" => {
                    let mr = PinnedMemoryResource::new(Default::default()).unwrap();
                    (mr.allocate(1 << 20, &s).unwrap(), Box::new(mr.clone()), mr.handle())
                }
                _ => {
                    let mr = ManagedMemoryResource::new(Some(ManagedMemoryResourceOptions::default())).unwrap();
                    let pool = mr.pool().expect("a managed pool").handle();
                    (mr.allocate(1 << 20, &s).unwrap(), Box::new(mr), pool)
                }
            };
            // What the pool's destroy waits for: memory whose free is queued and has not run
            // cannot be trimmed (it still holds reserved memory), once it ran it can.
            let trimmed_reserve = || {
                // SAFETY: the pool is alive (its resource is held while this is called).
                unsafe {
                    cuda_tests::check(cuda_sys::driver::cuMemPoolTrimTo(pool, 0));
                    let mut reserved = 0u64;
                    cuda_tests::check(cuda_sys::driver::cuMemPoolGetAttribute(
                        pool,
                        cuda_sys::driver::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                        (&mut reserved as *mut u64).cast(),
                    ));
                    reserved
                }
            };
            buffer.fill_u8(0x11, &s).unwrap();
            gate.hold(&s);
            buffer.fill_u8(0x22, &s).unwrap();
            drop_at_once("a pool buffer whose work is held", buffer);
            assert!(
                trimmed_reserve() > 0,
                "{kind} pool: memory whose free is queued behind held work was trimmed: the pool's destroy cannot wait for its frees this way"
            );
            if round == 0 {
                // Once the free ran, nothing is left (checked on a pool kept alive meanwhile).
                gate.open();
                s.sync().unwrap();
                assert_eq!(trimmed_reserve(), 0, "{kind} pool: memory kept after its free ran");
                drop(resource);
                continue;
            }
            drop_at_once("the last reference to the pool's resource", resource);
            std::thread::sleep(Duration::from_millis(50));
            gate.open();
            s.sync().unwrap();
        }
    }
    // The release thread destroys the pools once their frees ran.
    assert!(
        cuda_tests::releases_drain(Duration::from_secs(20)),
        "a pool was never destroyed: pending_releases stayed at {}",
        cuda_core::pending_releases()
    );
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}

// Round 3, finding 7: after `Graph::update`, the definition the graph was instantiated from (and
// the values its nodes held: here a callback's captured token) stayed alive until the graph went.
// It is released once the launches that used it are done, as cuda.core releases the owners an
// update replaces; what the graph runs now stays held, and per-node updates need the old
// definition only while someone keeps it.
#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn an_update_releases_the_instantiated_definition_after_its_launches() {
    let _one = one_at_a_time();
    let (_d, s) = setup();
    let gate = Gate::default();
    let (first, mut graph, first_released) = launched_held_graph(&s, &gate);
    let (token, second_released) = new_token();
    let second = GraphDefinition::new().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    second
        .callback(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            let _ = &token;
        })
        .unwrap();
    assert!(graph.definition().is_some());
    graph.update(&second).unwrap();
    drop_at_once("the instantiated definition", first);
    drop_at_once("the update's definition", second);
    // The held launch still runs the first definition's callback: released only after it.
    released_after_the_work("the instantiated definition's callback", &gate, || {
        first_released.load(Ordering::SeqCst)
    });
    assert!(
        graph.definition().is_none(),
        "nothing else holds the instantiated definition"
    );
    // The graph runs the update's callback, which it holds.
    graph.launch(&s).unwrap();
    graph.launch(&s).unwrap();
    s.sync().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    assert!(
        !second_released.load(Ordering::SeqCst),
        "the graph runs what it was updated with"
    );
    assert!(graph.kernel_nodes().is_err(), "no definition to name nodes of");
    drop(graph);
    let start = Instant::now();
    while !second_released.load(Ordering::SeqCst) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the update's callback was never released"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let errors = cuda_core::take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
}
