//! Graph node handles and updates on the GPU (issue 36 item 3, issue 33 item 3): the nodes a
//! capture recorded, in launch order, naming their kernels; typed and untyped kernel node updates
//! (kernel, configuration and arguments together) in definitions and executable graphs; copy,
//! memset and child-graph node updates; what allocation and host nodes read back; managed graph
//! memory. Results are read back from the device. Every test is in `graph_nodes::`, so
//! `run.sh graph_nodes` runs them all.

mod graph_nodes {
    use cuda_core::graph::{CaptureMode, GraphAllocOptions, GraphDefinition, GraphMemoryType, NodeParams, NodeType};
    use cuda_core::{
        Buffer, CodeType, Device, Kernel, LaunchConfig, Program, ProgramOptions, SourceType, Stream, StreamOptions,
        TypedBuffer, TypedKernel,
    };
    use cuda_tests::skip_part;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    const N: usize = 1024;

    fn setup() -> (Device, Stream) {
        let d = Device::new(0).expect("a GPU");
        d.set_current().unwrap();
        let s = d
            .create_stream(StreamOptions {
                nonblocking: true,
                priority: None,
            })
            .unwrap();
        (d, s)
    }

    type Fill = TypedKernel<(*mut f32, f32, u32)>;
    type Saxpy = TypedKernel<(f32, *const f32, *mut f32, u32)>;

    /// `fill(y, v, n)`: y = v; `scale(y, a, n)`: y *= a; `saxpy(a, x, y, n)`: y = a*x + y.
    struct Kernels {
        fill: Fill,
        scale: Fill,
        saxpy: Saxpy,
    }

    fn kernels() -> Kernels {
        let source = r#"
            extern "C" __global__ void fill(float* y, float v, unsigned n) {
                unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = v;
            }
            extern "C" __global__ void scale(float* y, float a, unsigned n) {
                unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] *= a;
            }
            extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {
                unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }"#;
        let code = Program::new(source, SourceType::Cxx, ProgramOptions::default())
            .unwrap()
            .compile(CodeType::Cubin, &[])
            .unwrap();
        let get = |name: &str| -> Kernel { code.get_kernel(name).unwrap() };
        Kernels {
            fill: get("fill").typed().unwrap(),
            scale: get("scale").typed().unwrap(),
            saxpy: get("saxpy").typed().unwrap(),
        }
    }

    fn all() -> LaunchConfig {
        LaunchConfig::new((N as u32).div_ceil(256), 256)
    }

    fn floats(d: &Device, s: &Stream, f: impl Fn(usize) -> f32) -> TypedBuffer<f32> {
        let v: Vec<f32> = (0..N).map(f).collect();
        TypedBuffer::from_host_blocking(d, &v, s).unwrap()
    }

    fn zeros(d: &Device, s: &Stream) -> TypedBuffer<f32> {
        floats(d, s, |_| 0.0)
    }

    fn read(b: &TypedBuffer<f32>, s: &Stream) -> Vec<f32> {
        b.to_vec_blocking(s).unwrap()
    }

    fn words(b: &Buffer, s: &Stream) -> Vec<u32> {
        let v = b.to_vec::<u32>(s).unwrap();
        s.sync().unwrap();
        v
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn a_capture_returns_its_nodes_in_launch_order_naming_their_kernels() {
        let (d, s) = setup();
        let k = kernels();
        let x = floats(&d, &s, |i| i as f32);
        let y = zeros(&d, &s);
        let half = LaunchConfig::new(2, 256);
        let (mut graph, nodes) = s
            .capture_graph_nodes(CaptureMode::Relaxed, |c| {
                y.as_buffer().fill_u8(0, c)?;
                // SAFETY: each kernel touches N floats of x and y, which hold N.
                unsafe {
                    k.fill.launch(c, &all(), (&y, 1.0f32, N as u32))?;
                    k.saxpy.launch(c, &all(), (2.0f32, x.read_only(), &y, N as u32))?;
                    k.scale.launch(c, &half, (&y, 3.0f32, N as u32))
                }
            })
            .unwrap();
        let types: Vec<NodeType> = nodes.iter().map(|n| n.node_type().unwrap()).collect();
        assert_eq!(
            types,
            [NodeType::Memset, NodeType::Kernel, NodeType::Kernel, NodeType::Kernel]
        );
        let ran: Vec<String> = nodes[1..]
            .iter()
            .map(|n| n.kernel().unwrap().name().to_owned())
            .collect();
        assert_eq!(ran, ["fill", "saxpy", "scale"]);
        assert_eq!(nodes[2].kernel().unwrap().handle(), k.saxpy.kernel().handle());
        assert_eq!(nodes[3].config().unwrap(), half);
        assert_eq!(nodes[1].config().unwrap(), all());
        assert!(nodes[0].kernel().is_err(), "a memset node runs no kernel");
        graph.launch(&s).unwrap();
        // Only the first 512 elements are scaled (half the grid).
        let got = read(&y, &s);
        assert!(got[..512]
            .iter()
            .enumerate()
            .all(|(i, v)| *v == 3.0 * (2.0 * i as f32 + 1.0)));
        assert!(got[512..]
            .iter()
            .enumerate()
            .all(|(i, v)| *v == 2.0 * (i + 512) as f32 + 1.0));

        // Typed argument updates of the executable graph, by the node the capture returned.
        let z = zeros(&d, &s);
        // SAFETY: each kernel touches N floats of its buffers, which hold N.
        unsafe {
            graph
                .set_typed_kernel_args(&nodes[1], &k.fill, (&z, 2.0f32, N as u32))
                .unwrap();
            graph
                .set_typed_kernel_args(&nodes[2], &k.saxpy, (1.0f32, x.view(), &z, N as u32))
                .unwrap();
            graph
                .set_typed_kernel_args(&nodes[3], &k.scale, (&z, 0.5f32, N as u32))
                .unwrap();
            // The node runs scale, not fill (same parameter types): refused, nothing changed.
            let e = graph
                .set_typed_kernel_args(&nodes[3], &k.fill, (&z, 9.0f32, N as u32))
                .unwrap_err();
            assert!(e.to_string().contains("another kernel than fill"), "{e}");
        }
        // The graph holds z: dropping ours changes nothing.
        let z_copy = TypedBuffer::<f32>::allocate(&d.memory_resource().unwrap(), N, &s).unwrap();
        graph.launch(&s).unwrap();
        z.copy_to(&z_copy, &s).unwrap();
        drop(z);
        graph.launch(&s).unwrap();
        let got = read(&z_copy, &s);
        assert!(got[..512].iter().enumerate().all(|(i, v)| *v == 0.5 * (i as f32 + 2.0)));
        assert!(got[512..].iter().enumerate().all(|(i, v)| *v == (i + 512) as f32 + 2.0));

        // The builder path: recorded_nodes while building and after.
        let mut b = s.create_graph_builder();
        b.begin_building(CaptureMode::ThreadLocal).unwrap();
        // SAFETY: as above.
        unsafe { k.fill.launch(b.stream(), &all(), (&y, 4.0f32, N as u32)) }.unwrap();
        assert_eq!(b.recorded_nodes().unwrap().len(), 1);
        // SAFETY: as above.
        unsafe { k.scale.launch(b.stream(), &all(), (&y, 2.0f32, N as u32)) }.unwrap();
        b.end_building().unwrap();
        let recorded = b.recorded_nodes().unwrap();
        assert_eq!(recorded.len(), 2);
        assert_eq!(recorded[1].kernel().unwrap().name(), "scale");
        assert_eq!(recorded[0].graph(), b.graph_definition().unwrap());
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn kernel_node_updates_change_kernel_config_and_arguments_together() {
        let (d, s) = setup();
        let k = kernels();
        let x = floats(&d, &s, |i| i as f32);
        let y = zeros(&d, &s);
        let g = GraphDefinition::new().unwrap();
        // SAFETY: fill writes N floats of y, which holds N.
        let node = unsafe { g.launch(&all(), k.fill.kernel(), (&y, 1.0f32, N as u32)) }.unwrap();
        assert_eq!(node.kernel().unwrap().name(), "fill");
        let mut first = g.instantiate(&Default::default()).unwrap();

        // The definition's node now runs saxpy over half the grid: later instantiations only.
        let half = LaunchConfig::new(2, 256);
        // SAFETY: saxpy reads and writes N floats of x and y.
        unsafe { node.update_typed_kernel(&half, &k.saxpy, (3.0f32, x.read_only(), &y, N as u32)) }.unwrap();
        assert_eq!(node.kernel().unwrap().name(), "saxpy");
        assert_eq!(node.config().unwrap(), half);
        first.launch(&s).unwrap();
        assert!(read(&y, &s).iter().all(|v| *v == 1.0), "the first graph still fills");
        let second = g.instantiate(&Default::default()).unwrap();
        second.launch(&s).unwrap();
        let got = read(&y, &s);
        assert!(got[..512].iter().enumerate().all(|(i, v)| *v == 3.0 * i as f32 + 1.0));
        assert!(got[512..].iter().all(|v| *v == 1.0));
        // A typed argument update for another kernel than the node's is refused.
        // SAFETY: (refused before the driver sees it).
        let e = unsafe { node.set_typed_kernel_args(&k.fill, (&y, 0.0f32, N as u32)) }.unwrap_err();
        assert!(e.to_string().contains("another kernel"), "{e}");

        // The first executable graph's node: scale over the whole grid, into a buffer only it
        // holds.
        let z = floats(&d, &s, |_| 2.0);
        let z_out = zeros(&d, &s);
        // SAFETY: scale touches N floats of z.
        unsafe { first.update_typed_kernel(&node, &all(), &k.scale, (&z, 5.0f32, N as u32)) }.unwrap();
        // An argument update afterwards keeps the kernel and configuration the update gave.
        // SAFETY: as above.
        unsafe { first.set_typed_kernel_args(&node, &k.scale, (&z, 4.0f32, N as u32)) }.unwrap();
        // SAFETY: (refused: the node runs scale in this graph).
        let e = unsafe { first.set_typed_kernel_args(&node, &k.fill, (&z, 4.0f32, N as u32)) }.unwrap_err();
        assert!(e.to_string().contains("runs scale"), "{e}");
        first.launch(&s).unwrap();
        z.copy_to(&z_out, &s).unwrap();
        drop(z);
        first.launch(&s).unwrap();
        assert!(read(&z_out, &s).iter().all(|v| *v == 8.0));
        // Launch attributes cannot change in an executable graph.
        let cooperative = LaunchConfig {
            cooperative_launch: true,
            ..all()
        };
        // SAFETY: (refused before the driver sees the arguments).
        let e = unsafe { first.update_typed_kernel(&node, &cooperative, &k.fill, (&y, 0.0f32, N as u32)) }.unwrap_err();
        assert!(e.to_string().contains("launch attributes"), "{e}");
        // Untyped, as before: unsafe, the caller vouches for the types.
        // SAFETY: fill takes (float*, float, unsigned); y holds N floats.
        unsafe { first.update_kernel(&node, &all(), k.fill.kernel(), (&y, 6.0f32, N as u32)) }.unwrap();
        first.launch(&s).unwrap();
        assert!(read(&y, &s).iter().all(|v| *v == 6.0));
        // Nodes of another graph are refused.
        let other = GraphDefinition::new().unwrap();
        let stranger = other.join(&[]).unwrap();
        // SAFETY: (refused before the driver sees it).
        let e = unsafe { first.update_kernel(&stranger, &all(), k.fill.kernel(), (&y, 6.0f32, N as u32)) };
        assert!(e.is_err());
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn copy_and_memset_nodes_update_in_definitions_and_executable_graphs() {
        let (d, s) = setup();
        let bytes = N * 4;
        let alloc = |v: u32| {
            let b = d.allocate(bytes, &s).unwrap();
            b.fill_u32(v, &s).unwrap();
            b
        };
        let (a, b, c) = (alloc(1), alloc(0), alloc(0));
        let g = GraphDefinition::new().unwrap();
        let copy = g.memcpy(&b, &a, bytes).unwrap();
        let set = copy.memset(&a, 5u32, N).unwrap();
        let mut exec = g.instantiate(&Default::default()).unwrap();

        // Executable graph: copy from a temporary buffer (held by the graph once given) into c.
        {
            let src = alloc(42);
            exec.update_memcpy(&copy, &c, &src, bytes).unwrap();
        }
        exec.update_memset(&set, &b, 9u32, N, 1, 0).unwrap();
        exec.launch(&s).unwrap();
        assert!(words(&c, &s).iter().all(|v| *v == 42));
        assert!(words(&b, &s).iter().all(|v| *v == 9));
        assert!(
            words(&a, &s).iter().all(|v| *v == 1),
            "the old memset target is untouched"
        );
        // A value change keeps the region the update gave.
        exec.set_memset_value(&set, 7u32).unwrap();
        exec.launch(&s).unwrap();
        assert!(words(&b, &s).iter().all(|v| *v == 7));
        assert!(words(&a, &s).iter().all(|v| *v == 1));
        // Refusals: too large, the wrong node type, a width not the node's.
        let small = d.allocate(16, &s).unwrap();
        assert!(exec.update_memcpy(&copy, &small, &a, bytes).is_err());
        assert!(exec.update_memcpy(&set, &c, &a, bytes).is_err());
        assert!(exec.set_memset_value(&set, 1u8).is_err());
        assert!(exec.update_memset(&set, &small, 1u32, N, 1, 0).is_err());

        // Definition: later instantiations copy a into c and write bytes of 3 over half of a.
        copy.update_memcpy(&c, &a, bytes / 2).unwrap();
        set.update_memset(&a, 3u8, bytes / 2, 1, 0).unwrap();
        match set.params().unwrap() {
            NodeParams::Memset {
                dst,
                value,
                element_size,
                width,
                ..
            } => assert_eq!((dst, value, element_size, width), (a.handle(), 3, 1, bytes / 2)),
            other => panic!("{other:?}"),
        }
        match copy.params().unwrap() {
            NodeParams::Memcpy { dst, src, size } => assert_eq!((dst, src, size), (c.handle(), a.handle(), bytes / 2)),
            other => panic!("{other:?}"),
        }
        assert!(copy.update_memcpy(&small, &a, bytes).is_err());
        assert!(
            set.update_memset(&a, 3u8, bytes, 2, 0).is_err(),
            "a pitch under the row"
        );
        c.fill_u32(0, &s).unwrap();
        let fresh = g.instantiate(&Default::default()).unwrap();
        fresh.launch(&s).unwrap();
        let cw = words(&c, &s);
        assert!(cw[..N / 2].iter().all(|v| *v == 1) && cw[N / 2..].iter().all(|v| *v == 0));
        let aw = words(&a, &s);
        assert!(aw[..N / 2].iter().all(|v| *v == 0x0303_0303) && aw[N / 2..].iter().all(|v| *v == 1));
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn child_graph_nodes_update_in_executable_graphs_and_definitions() {
        let (d, s) = setup();
        let k = kernels();
        let y = zeros(&d, &s);
        let child = |v: f32| {
            let c = GraphDefinition::new().unwrap();
            // SAFETY: fill writes N floats of y, which the parent holds (through the child).
            unsafe { c.launch(&all(), k.fill.kernel(), (&y, v, N as u32)) }.unwrap();
            c
        };
        let g = GraphDefinition::new().unwrap();
        let node = g.embed(&child(1.0)).unwrap();
        let mut exec = g.instantiate(&Default::default()).unwrap();
        exec.update_child(&node, &child(2.0)).unwrap();
        exec.launch(&s).unwrap();
        assert!(read(&y, &s).iter().all(|v| *v == 2.0));
        // Another topology is refused by the driver.
        let two = child(3.0);
        two.join(&[]).unwrap();
        assert!(exec.update_child(&node, &two).is_err());
        assert!(exec.update_child(&node, &g).is_err(), "itself");

        let NodeParams::ChildGraph(before) = node.params().unwrap() else {
            panic!("a child-graph node")
        };
        node.update_child(&child(4.0)).unwrap();
        assert!(before.num_nodes().is_err(), "the copy it replaced is gone");
        let NodeParams::ChildGraph(after) = node.params().unwrap() else {
            panic!("a child-graph node")
        };
        assert_eq!(after.num_nodes().unwrap(), 1);
        g.instantiate(&Default::default()).unwrap().launch(&s).unwrap();
        assert!(read(&y, &s).iter().all(|v| *v == 4.0));
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn allocation_and_host_nodes_read_back_what_they_were_given() {
        let (d, s) = setup();
        let g = GraphDefinition::new().unwrap();
        let options = GraphAllocOptions {
            device: Some(d),
            ..Default::default()
        };
        let alloc = g.allocate(4096, &options).unwrap();
        match alloc.params().unwrap() {
            NodeParams::MemAlloc {
                bytesize,
                device,
                memory_type,
                peer_access,
                ..
            } => {
                assert_eq!(
                    (bytesize, device, memory_type),
                    (4096, Some(d), GraphMemoryType::Device)
                );
                assert!(peer_access.is_empty());
            }
            other => panic!("{other:?}"),
        }

        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let host = g
            .callback(move || {
                counted.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        let f = host.host_callback().unwrap().expect("a callback given here");
        f();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let counted = calls.clone();
        host.set_callback(move || {
            counted.fetch_add(10, Ordering::SeqCst);
        })
        .unwrap();
        host.host_callback().unwrap().unwrap()();
        assert_eq!(calls.load(Ordering::SeqCst), 11);
        assert!(alloc.host_callback().is_err(), "not a host node");
        // A copy of a graph reads back the same callback (graphs with allocation nodes cannot be
        // copied: the driver refuses).
        let plain = GraphDefinition::new().unwrap();
        let counted = calls.clone();
        plain
            .callback(move || {
                counted.fetch_add(10, Ordering::SeqCst);
            })
            .unwrap();
        let copy = plain.clone_graph().unwrap();
        let node = copy
            .nodes()
            .unwrap()
            .into_iter()
            .find(|n| n.node_type().unwrap() == NodeType::Host)
            .unwrap();
        node.host_callback().unwrap().unwrap()();
        assert_eq!(calls.load(Ordering::SeqCst), 21);
        drop(s);
    }

    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn managed_graph_memory_is_allocated_written_and_read_back() {
        let (d, s) = setup();
        let out = Arc::new(d.allocate(N * 4, &s).unwrap());
        let g = GraphDefinition::new().unwrap();
        let options = GraphAllocOptions {
            memory_type: GraphMemoryType::Managed,
            ..Default::default()
        };
        let alloc = match g.allocate(N * 4, &options) {
            Ok(a) => a,
            Err(e) => {
                skip_part(format!("managed graph allocations: {e}"));
                return;
            }
        };
        let NodeParams::MemAlloc {
            dptr,
            memory_type,
            device,
            ..
        } = alloc.params().unwrap()
        else {
            panic!("an allocation node")
        };
        assert_eq!((memory_type, device), (GraphMemoryType::Managed, Some(d)));
        // SAFETY: dptr is the graph allocation, live between its allocation and free nodes; out
        // is held by the graph (keep_alive).
        let fill = unsafe { alloc.memset_raw(dptr, 11u32, N, 1, 0) }.unwrap();
        // SAFETY: as above.
        let copy = unsafe { fill.memcpy_raw(out.handle(), dptr, N * 4) }.unwrap();
        g.keep_alive(out.clone()).unwrap();
        copy.deallocate(&alloc).unwrap();
        g.instantiate(&Default::default()).unwrap().launch(&s).unwrap();
        assert!(words(&out, &s).iter().all(|v| *v == 11));
    }

    // Composition review of round 3: after a whole-graph update, a value-only node update read
    // the instantiated definition's node (its old buffer), which the graph no longer held: the
    // graph could write freed memory. Refused now; whole-parameter updates still work.
    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn value_only_node_updates_after_a_whole_graph_update_are_refused() {
        let (d, s) = setup();
        let (a, b) = (d.allocate(4096, &s).unwrap(), d.allocate(4096, &s).unwrap());
        let def1 = GraphDefinition::new().unwrap();
        let n1 = def1.memset(&a, 0u8, 4096).unwrap();
        let def2 = GraphDefinition::new().unwrap();
        def2.memset(&b, 5u8, 4096).unwrap();
        let mut g = def1.instantiate(&Default::default()).unwrap();
        // Before the update: the definition says what the graph runs.
        g.set_memset_value(&n1, 3u8).unwrap();
        g.update(&def2).unwrap();
        let err = g.set_memset_value(&n1, 7u8).unwrap_err().to_string();
        assert!(err.contains("after Graph::update"), "{err}");
        drop((def1, def2));
        g.launch(&s).unwrap();
        assert!(b.to_vec::<u8>(&s).unwrap().iter().all(|v| *v == 5));
        // The whole region given: updated.
        g.update_memset(&n1, &b, 9u8, 4096, 1, 0).unwrap();
        g.launch(&s).unwrap();
        assert!(b.to_vec::<u8>(&s).unwrap().iter().all(|v| *v == 9));
    }

    // cuda.core's EventRecordNode.event / EventWaitNode.event: the Event a node names, read back.
    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn event_nodes_read_back_their_events() {
        let (d, s) = setup();
        let (a, b) = (
            d.create_event(Default::default()).unwrap(),
            d.create_event(Default::default()).unwrap(),
        );
        let g = GraphDefinition::new().unwrap();
        let recorded = g.record(&a).unwrap();
        let waited = recorded.wait(&b).unwrap();
        assert_eq!(recorded.event().unwrap(), Some(a.clone()));
        assert_eq!(waited.event().unwrap(), Some(b.clone()));
        recorded.set_event(&b).unwrap();
        assert_eq!(recorded.event().unwrap(), Some(b.clone()));
        let other = waited.join(&[]).unwrap();
        assert!(other.event().is_err(), "not an event node");
        s.record(&b).unwrap();
        g.instantiate(&Default::default()).unwrap().launch(&s).unwrap();
        s.sync().unwrap();
    }

    /// Adds a conditional node of `kind` with `size` bodies to the graph `stream` is capturing,
    /// with raw driver calls, as code outside this crate (a library handed the stream) would, and
    /// makes it the capture's next dependency. Its condition defaults to 0 at every launch.
    ///
    /// # Safety
    /// `stream` is capturing, on this thread, in the current context.
    unsafe fn add_foreign_conditional(
        stream: &Stream,
        kind: cuda_sys::driver::CUgraphConditionalNodeType,
        size: u32,
    ) -> cuda_sys::driver::CUgraphNode {
        use cuda_sys::driver;
        let (mut status, mut id, mut graph) = (
            driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE,
            0,
            std::ptr::null_mut(),
        );
        let (mut deps, mut edges, mut count) = (std::ptr::null(), std::ptr::null(), 0usize);
        let mut ctx = std::ptr::null_mut();
        let mut handle = 0;
        let mut node = std::ptr::null_mut();
        // SAFETY: the caller's promise; every out-pointer is a local; the dependencies the driver
        // returned are used before the capture changes.
        unsafe {
            driver::cuStreamGetCaptureInfo(
                stream.handle(),
                &mut status,
                &mut id,
                &mut graph,
                &mut deps,
                &mut edges,
                &mut count,
            )
            .result()
            .unwrap();
            assert_eq!(status, driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE);
            driver::cuCtxGetCurrent(&mut ctx).result().unwrap();
            driver::cuGraphConditionalHandleCreate(&mut handle, graph, ctx, 0, driver::CU_GRAPH_COND_ASSIGN_DEFAULT)
                .result()
                .unwrap();
            let mut params: driver::CUgraphNodeParams = std::mem::zeroed();
            params.type_ = driver::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
            params.__bindgen_anon_1.conditional = driver::CUDA_CONDITIONAL_NODE_PARAMS {
                handle,
                type_: kind,
                size,
                phGraph_out: std::ptr::null_mut(),
                ctx,
            };
            driver::cuGraphAddNode(&mut node, graph, deps, edges, count, &mut params)
                .result()
                .unwrap();
            driver::cuStreamUpdateCaptureDependencies(
                stream.handle(),
                &mut node,
                std::ptr::null(),
                1,
                driver::CUstreamUpdateCaptureDependencies_flags_enum::CU_STREAM_SET_CAPTURE_DEPENDENCIES.0,
            )
            .result()
            .unwrap();
        }
        node
    }

    // cuda.core's ConditionalNode.cond_type and .branches for conditional nodes this crate did
    // not add (recorded into a capture by raw driver calls): read back with cuGraphNodeGetParams
    // on CUDA 13.2+ drivers; older drivers cannot report them (cuda.core's cond_type is None
    // there), and the node is NodeParams::Other(NodeType::Conditional).
    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn conditional_nodes_recorded_by_other_code_report_their_type_and_branches() {
        use cuda_core::graph::ConditionalType;
        use cuda_sys::driver::CUgraphConditionalNodeType as K;
        let (d, s) = setup();
        let fill = kernels().fill;
        let y = zeros(&d, &s);
        let mut builder = s.begin_capture(CaptureMode::ThreadLocal).unwrap();
        // SAFETY: the kernel writes N floats of y, which holds them.
        unsafe { fill.launch(builder.stream(), &all(), (&y, 1.0f32, N as u32)) }.unwrap();
        // SAFETY: the builder's stream is capturing, here, in the current context.
        let (switch, if_else) = unsafe {
            (
                add_foreign_conditional(builder.stream(), K::CU_GRAPH_COND_TYPE_SWITCH, 3),
                add_foreign_conditional(builder.stream(), K::CU_GRAPH_COND_TYPE_IF, 2),
            )
        };
        builder.end_building().unwrap();
        let graph = builder.graph_definition().unwrap();
        let nodes = graph.nodes().unwrap();
        let reads_back = cuda_core::system::get_user_mode_driver_version().unwrap() >= (13, 2);
        for (handle, kind, size) in [(switch, ConditionalType::Switch, 3), (if_else, ConditionalType::If, 2)] {
            let node = nodes
                .iter()
                .find(|n| n.handle() == handle)
                .expect("the captured graph lists the node");
            assert_eq!(node.node_type().unwrap(), NodeType::Conditional);
            match node.params().unwrap() {
                NodeParams::Conditional {
                    kind: read, branches, ..
                } => {
                    assert!(reads_back, "only a 13.2+ driver reports a foreign conditional node");
                    assert_eq!((read, read.name(), branches.len()), (kind, kind.name(), size));
                    for body in &branches {
                        assert_eq!(body.num_nodes().unwrap(), 0, "the bodies are empty");
                    }
                    // Read again: the same bodies (recorded on the first read).
                    let NodeParams::Conditional { branches: again, .. } = node.params().unwrap() else {
                        panic!("a second read reports a conditional node");
                    };
                    assert_eq!(again, branches);
                }
                NodeParams::Other(NodeType::Conditional) => assert!(
                    !reads_back,
                    "a 13.2+ driver reports the parameters of a conditional node"
                ),
                other => panic!("a conditional node read back as {other:?}"),
            }
        }
        if !reads_back {
            skip_part("the driver is older than CUDA 13.2: conditional parameters cannot be read back (checked: NodeParams::Other(Conditional))");
        }
        // The graph still runs: the kernel, then conditionals whose conditions are 0.
        let exec = builder.complete(&Default::default()).unwrap();
        exec.launch(&s).unwrap();
        assert!(read(&y, &s).iter().all(|v| *v == 1.0));
    }

    // Review (stale conditional entries): the driver frees a child copy's nodes and bodies with
    // it (destroy, update_child) and may give a new copy's conditional node a freed one's address:
    // nothing recorded for the freed ones is reported for the new one, and graphs read before
    // stay refused. Body of the child's if node: two nodes; of the one added in the copy: none.
    #[test]
    #[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
    fn conditionals_freed_with_a_child_copy_are_forgotten() {
        let (_d, _s) = setup();
        let reads_back = cuda_core::system::get_user_mode_driver_version().unwrap() >= (13, 2);
        let a = GraphDefinition::new().unwrap();
        let body = a.if_then(&a.create_condition(Some(0)).unwrap()).unwrap().then().clone();
        body.join(&[]).unwrap().join(&[]).unwrap();
        let g = GraphDefinition::new().unwrap();
        let condition = g.create_condition(Some(0)).unwrap();
        let copy_of = |c: &cuda_core::graph::GraphNode| {
            let NodeParams::ChildGraph(copy) = c.params().unwrap() else {
                panic!("a child node")
            };
            for n in copy.nodes().unwrap() {
                match n.params().unwrap() {
                    NodeParams::Conditional { branches: b, .. } => {
                        assert!(reads_back, "an older driver reports none: a stale entry");
                        assert!(b.len() == 1 && b[0].is_valid());
                        assert_eq!(b[0].num_nodes().unwrap(), 2, "the copy's own body");
                    }
                    NodeParams::Other(NodeType::Conditional) => assert!(!reads_back),
                    other => panic!("the copy holds only its if node, not {other:?}"),
                }
            }
            copy
        };
        let mut added = 0;
        for round in 0..8 {
            let c = match g.embed(&a) {
                Ok(c) => c,
                // CUDA 13.0's driver takes no conditional node inside a child graph.
                Err(e)
                    if round == 0
                        && e.driver_status() == Some(cuda_sys::driver::CUresult::CUDA_ERROR_NOT_SUPPORTED) =>
                {
                    cuda_tests::skip(format!("the driver takes no conditional node in a child graph: {e}"));
                    return;
                }
                Err(e) => panic!("embedding a graph with a conditional node: {e}"),
            };
            let copy = copy_of(&c);
            // Recorded on any driver (if the driver takes a conditional node in a copy).
            let made = copy.if_then(&condition).ok();
            let old = copy.nodes().unwrap();
            if round % 2 == 0 {
                c.destroy().unwrap();
            } else {
                c.update_child(&a).unwrap();
                copy_of(&c);
            }
            assert!(!copy.is_valid() && copy.join(&[]).is_err(), "the freed copy is refused");
            assert!(old.iter().all(|n| !n.is_valid() && n.params().is_err()));
            if let Some(made) = made {
                added += 1;
                let freed = made.then();
                assert!(!freed.is_valid() && freed.join(&[]).is_err(), "its freed body");
            }
        }
        if added == 0 {
            skip_part("the driver refused conditional nodes in child copies: only their own were checked");
        }
    }
}
