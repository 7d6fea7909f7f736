//! NCCL on the GPU (`cuda_core::nccl`): every collective checked element by element, in one
//! process (`init_all`) and across two processes (the unique id over a TCP socket, with NCCL's
//! own transports and forced onto its socket transport, the stand-in for two hosts); collectives
//! captured into a graph and relaunched; mismatched arguments refused before NCCL; a peer killed
//! mid-run, after which the survivor's watchdog aborts instead of hanging. Two-GPU tests skip on
//! one GPU, saying why. NVLink multicast stays off (`NCCL_NVLS_ENABLE=0`) in every process.
//!
//! The second process is this test executable itself, started with `NCCL_TEST_ROLE` set: it runs
//! only `nccl_child_rank_helper`, which does nothing in an ordinary run.

use cuda_core::nccl::{self, group, Communicator, CommunicatorOptions, ReduceOp, UniqueId};
use cuda_core::{Device, Stream, TypedBuffer};
use half::{bf16, f16};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

// Every test takes `cuda_tests::one_at_a_time`: communicators of several tests on the same two
// GPUs at once would compete for them (and a test waiting for its peer could wait behind another
// test's collective).

const ROLE: &str = "NCCL_TEST_ROLE";
const N: usize = 1000;

/// NVLink multicast off, in this process and every child (set once, before any NCCL call: NCCL
/// reads its settings from the environment, which must not change while another thread reads it).
fn quiet_nccl() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::env::set_var("NCCL_NVLS_ENABLE", "0");
        if std::env::var_os("NCCL_DEBUG").is_none() {
            std::env::set_var("NCCL_DEBUG", "WARN");
        }
    });
}

/// How long a rank process may live: a child whose parent failed (and so never finishes the
/// collective it waits in) exits by then instead of holding the test run.
const CHILD_DEADLINE: Duration = Duration::from_secs(120);

/// A rank process, killed when the test lets go of it (a failing test unwinds through here), so
/// no child outlives its test waiting for a peer that is gone.
struct Rank(Child);

impl Rank {
    fn wait(&mut self) -> std::process::ExitStatus {
        self.0.wait().unwrap()
    }
}

impl Drop for Rank {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// NCCL's version, or a skip when the machine has no NCCL.
fn nccl_here() -> bool {
    quiet_nccl();
    match nccl::version() {
        Ok(v) => {
            println!("NCCL {v:?}");
            true
        }
        Err(e) => {
            cuda_tests::skip(format!("no NCCL library here: {e}"));
            false
        }
    }
}

/// Two devices, or a skip saying why.
fn two_devices() -> Option<[Device; 2]> {
    if !nccl_here() {
        return None;
    }
    let n = cuda_core::device_count().expect("the device count");
    if n < 2 {
        cuda_tests::skip(format!("needs two GPUs, this machine has {n}"));
        return None;
    }
    Some([Device::new(0).unwrap(), Device::new(1).unwrap()])
}

fn stream_on(d: &Device) -> Stream {
    d.set_current().unwrap();
    d.create_stream(Default::default()).unwrap()
}

fn upload<T: cuda_core::Pod>(d: &Device, s: &Stream, data: &[T]) -> TypedBuffer<T> {
    // Whichever device is current: the host copy runs in the stream's context.
    TypedBuffer::from_host_blocking(d, data, s).unwrap()
}

fn zeros<T: cuda_core::Pod>(d: &Device, s: &Stream, n: usize) -> TypedBuffer<T> {
    upload(d, s, &vec![T::zeroed(); n])
}

/// What rank `r` contributes at element `i`.
fn value(r: usize, i: usize) -> f64 {
    ((r + 1) * (i % 97)) as f64
}

/// Every collective on `comms` (one rank each, the ranks of one communicator, in rank order:
/// all of them in one process, or this process's one), checked element by element. `all` is
/// the number of ranks; `issue` runs the calls (a group for several ranks in one thread).
fn check_collectives(comms: &[Communicator], devices: &[Device]) {
    let all = comms[0].count();
    let streams: Vec<Stream> = devices.iter().map(stream_on).collect();
    let sum_of = |i: usize| (0..all).map(|r| value(r, i)).sum::<f64>();
    // all_reduce (f32, Sum), PreMulSum (f32), in place Max (i32), bf16 Sum.
    let sends: Vec<_> = comms
        .iter()
        .zip(devices)
        .zip(&streams)
        .map(|((c, d), s)| upload(d, s, &(0..N).map(|i| value(c.rank(), i) as f32).collect::<Vec<_>>()))
        .collect();
    let recvs: Vec<_> = devices
        .iter()
        .zip(&streams)
        .map(|(d, s)| zeros::<f32>(d, s, N))
        .collect();
    let scaled: Vec<_> = devices
        .iter()
        .zip(&streams)
        .map(|(d, s)| zeros::<f32>(d, s, N))
        .collect();
    let ints: Vec<_> = comms
        .iter()
        .zip(devices)
        .zip(&streams)
        .map(|((c, d), s)| {
            upload(
                d,
                s,
                &(0..N)
                    .map(|i| (value(c.rank(), i) as i32) * if i % 2 == 0 { 1 } else { -1 })
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let halves: Vec<_> = comms
        .iter()
        .zip(devices)
        .zip(&streams)
        .map(|((c, d), s)| {
            upload(
                d,
                s,
                &(0..N)
                    .map(|i| bf16::from_f64((c.rank() + i % 4) as f64))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    group(|g| {
        for k in 0..comms.len() {
            g.all_reduce(&comms[k], &sends[k], &recvs[k], ReduceOp::Sum, &streams[k])?;
            g.all_reduce(&comms[k], &sends[k], &scaled[k], ReduceOp::PreMulSum(0.5), &streams[k])?;
            g.all_reduce_in_place(&comms[k], &ints[k], ReduceOp::Max, &streams[k])?;
            g.all_reduce_in_place(&comms[k], &halves[k], ReduceOp::Sum, &streams[k])?;
        }
        Ok(())
    })
    .unwrap();
    for k in 0..comms.len() {
        let (got, s) = (recvs[k].to_vec_blocking(&streams[k]).unwrap(), &streams[k]);
        for (i, v) in got.iter().enumerate() {
            assert_eq!(*v as f64, sum_of(i), "all_reduce sum, element {i}");
        }
        for (i, v) in scaled[k].to_vec_blocking(s).unwrap().iter().enumerate() {
            assert_eq!(*v as f64, 0.5 * sum_of(i), "PreMulSum, element {i}");
        }
        for (i, v) in ints[k].to_vec_blocking(s).unwrap().iter().enumerate() {
            let expected = (0..all)
                .map(|r| (value(r, i) as i32) * if i % 2 == 0 { 1 } else { -1 })
                .max()
                .unwrap();
            assert_eq!(*v, expected, "in-place max, element {i}");
        }
        for (i, v) in halves[k].to_vec_blocking(s).unwrap().iter().enumerate() {
            let expected: usize = (0..all).map(|r| r + i % 4).sum();
            assert_eq!(v.to_f64(), expected as f64, "bf16 sum, element {i}");
        }
    }
    // broadcast from the last rank (f64), reduce to rank 0 (i64), in place broadcast (u8 bytes).
    let root = all - 1;
    let bsend: Vec<_> = comms
        .iter()
        .zip(devices)
        .zip(&streams)
        .map(|((c, d), s)| upload(d, s, &(0..N).map(|i| value(c.rank(), i) + 0.25).collect::<Vec<f64>>()))
        .collect();
    let brecv: Vec<_> = devices
        .iter()
        .zip(&streams)
        .map(|(d, s)| zeros::<f64>(d, s, N))
        .collect();
    let rsend: Vec<_> = comms
        .iter()
        .zip(devices)
        .zip(&streams)
        .map(|((c, d), s)| {
            upload(
                d,
                s,
                &(0..N).map(|i| value(c.rank(), i) as i64 - 50).collect::<Vec<_>>(),
            )
        })
        .collect();
    let rrecv: Vec<_> = devices
        .iter()
        .zip(&streams)
        .map(|(d, s)| zeros::<i64>(d, s, N))
        .collect();
    let bytes: Vec<_> = comms
        .iter()
        .zip(devices)
        .zip(&streams)
        .map(|((c, d), s)| upload(d, s, &[c.rank() as u8 + 7; 64]))
        .collect();
    group(|g| {
        for k in 0..comms.len() {
            g.broadcast(&comms[k], &bsend[k], &brecv[k], root, &streams[k])?;
            g.reduce(&comms[k], &rsend[k], &rrecv[k], ReduceOp::Sum, 0, &streams[k])?;
            g.broadcast_in_place(&comms[k], bytes[k].as_buffer(), root, &streams[k])?;
        }
        Ok(())
    })
    .unwrap();
    for k in 0..comms.len() {
        let s = &streams[k];
        for (i, v) in brecv[k].to_vec_blocking(s).unwrap().iter().enumerate() {
            assert_eq!(*v, value(root, i) + 0.25, "broadcast, element {i}");
        }
        if comms[k].rank() == 0 {
            for (i, v) in rrecv[k].to_vec_blocking(s).unwrap().iter().enumerate() {
                assert_eq!(*v as f64, sum_of(i) - 50.0 * all as f64, "reduce, element {i}");
            }
        }
        assert_eq!(
            bytes[k].to_vec_blocking(s).unwrap(),
            vec![root as u8 + 7; 64],
            "broadcast in place"
        );
    }
    // all_gather (i32) and its in-place form, reduce_scatter (f16) and its in-place form.
    let gsend: Vec<_> = comms
        .iter()
        .zip(devices)
        .zip(&streams)
        .map(|((c, d), s)| {
            upload(
                d,
                s,
                &(0..N).map(|i| (c.rank() * 10_000 + i) as i32).collect::<Vec<_>>(),
            )
        })
        .collect();
    let grecv: Vec<_> = devices
        .iter()
        .zip(&streams)
        .map(|(d, s)| zeros::<i32>(d, s, N * all))
        .collect();
    let gin: Vec<_> = comms
        .iter()
        .zip(devices)
        .zip(&streams)
        .map(|((c, d), s)| {
            let mut v = vec![-1i32; N * all];
            for i in 0..N {
                v[c.rank() * N + i] = (c.rank() * 10_000 + i) as i32;
            }
            upload(d, s, &v)
        })
        .collect();
    let ssend: Vec<_> = comms
        .iter()
        .zip(devices)
        .zip(&streams)
        .map(|((c, d), s)| {
            upload(
                d,
                s,
                &(0..N * all)
                    .map(|i| f16::from_f64(((c.rank() + i) % 8) as f64))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let srecv: Vec<_> = devices
        .iter()
        .zip(&streams)
        .map(|(d, s)| zeros::<f16>(d, s, N))
        .collect();
    let sin: Vec<_> = comms
        .iter()
        .zip(devices)
        .zip(&streams)
        .map(|((c, d), s)| {
            upload(
                d,
                s,
                &(0..N * all)
                    .map(|i| f16::from_f64(((c.rank() + i) % 8) as f64))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    group(|g| {
        for k in 0..comms.len() {
            g.all_gather(&comms[k], &gsend[k], &grecv[k], &streams[k])?;
            g.all_gather_in_place(&comms[k], &gin[k], &streams[k])?;
            g.reduce_scatter(&comms[k], &ssend[k], &srecv[k], ReduceOp::Sum, &streams[k])?;
            g.reduce_scatter_in_place(&comms[k], &sin[k], ReduceOp::Sum, &streams[k])?;
        }
        Ok(())
    })
    .unwrap();
    for k in 0..comms.len() {
        let (s, me) = (&streams[k], comms[k].rank());
        let expected: Vec<i32> = (0..all)
            .flat_map(|r| (0..N).map(move |i| (r * 10_000 + i) as i32))
            .collect();
        assert_eq!(grecv[k].to_vec_blocking(s).unwrap(), expected, "all_gather");
        assert_eq!(gin[k].to_vec_blocking(s).unwrap(), expected, "all_gather in place");
        let part = |i: usize| (0..all).map(|r| ((r + me * N + i) % 8) as f64).sum::<f64>();
        for (i, v) in srecv[k].to_vec_blocking(s).unwrap().iter().enumerate() {
            assert_eq!(v.to_f64(), part(i), "reduce_scatter, element {i}");
        }
        let whole = sin[k].to_vec_blocking(s).unwrap();
        for i in 0..N {
            assert_eq!(
                whole[me * N + i].to_f64(),
                part(i),
                "reduce_scatter in place, element {i}"
            );
        }
    }
    // send / recv in a ring (u64): every rank sends to the next and receives from the previous.
    let psend: Vec<_> = comms
        .iter()
        .zip(devices)
        .zip(&streams)
        .map(|((c, d), s)| {
            upload(
                d,
                s,
                &(0..N).map(|i| (c.rank() * 1_000_000 + i) as u64).collect::<Vec<_>>(),
            )
        })
        .collect();
    let precv: Vec<_> = devices
        .iter()
        .zip(&streams)
        .map(|(d, s)| zeros::<u64>(d, s, N))
        .collect();
    group(|g| {
        for k in 0..comms.len() {
            let me = comms[k].rank();
            g.send(&comms[k], &psend[k], (me + 1) % all, &streams[k])?;
            g.recv(&comms[k], &precv[k], (me + all - 1) % all, &streams[k])?;
        }
        Ok(())
    })
    .unwrap();
    for k in 0..comms.len() {
        let from = (comms[k].rank() + all - 1) % all;
        let expected: Vec<u64> = (0..N).map(|i| (from * 1_000_000 + i) as u64).collect();
        assert_eq!(precv[k].to_vec_blocking(&streams[k]).unwrap(), expected, "send/recv");
    }
    for c in comms {
        c.check().unwrap();
    }
}

#[test]
#[ignore = "needs two GPUs"]
fn nccl_init_all_over_two_gpus_every_collective() {
    let _one = cuda_tests::one_at_a_time();
    let Some(devices) = two_devices() else { return };
    let comms = Communicator::init_all(&devices).unwrap();
    assert_eq!((comms[0].rank(), comms[1].rank()), (0, 1));
    assert_eq!(comms[1].count(), 2);
    assert_eq!(comms[1].device().device_id(), 1);
    check_collectives(&comms, &devices);
    // A group over both devices leaves the thread's current context as it was (NCCL switches
    // to each communicator's device and back).
    let streams: Vec<Stream> = devices.iter().map(stream_on).collect();
    let ones: Vec<_> = devices
        .iter()
        .zip(&streams)
        .map(|(d, s)| upload(d, s, &vec![1.0f32; N]))
        .collect();
    for current in [1, 0] {
        devices[current].set_current().unwrap();
        let before = cuda_core::Context::current_handle().unwrap();
        group(|g| {
            for k in 0..2 {
                g.all_reduce_in_place(&comms[k], &ones[k], ReduceOp::Max, &streams[k])?;
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(
            cuda_core::Context::current_handle().unwrap(),
            before,
            "device {current}'s context stays current"
        );
    }
    for (k, s) in streams.iter().enumerate() {
        assert_eq!(ones[k].to_vec_blocking(s).unwrap(), vec![1.0f32; N]);
    }
    // Dropped with work queued: released on the release thread, never waiting here.
    let data: Vec<_> = devices
        .iter()
        .zip(&streams)
        .map(|(d, s)| zeros::<f32>(d, s, 1 << 20))
        .collect();
    group(|g| {
        for k in 0..2 {
            g.all_reduce_in_place(&comms[k], &data[k], ReduceOp::Sum, &streams[k])?;
        }
        Ok(())
    })
    .unwrap();
    let started = Instant::now();
    drop(comms);
    assert!(started.elapsed() < Duration::from_millis(100), "the drop waited");
    for s in &streams {
        s.sync().unwrap();
    }
}

#[test]
#[ignore = "needs a GPU"]
fn nccl_one_rank_runs_and_bad_arguments_are_refused_before_nccl() {
    let _one = cuda_tests::one_at_a_time();
    if !nccl_here() {
        return;
    }
    let d = Device::new(0).unwrap();
    let s = stream_on(&d);
    let comms = Communicator::init_all(std::slice::from_ref(&d)).unwrap();
    let c = &comms[0];
    assert_eq!((c.rank(), c.count()), (0, 1));
    let a = upload(&d, &s, &[1.0f32, 2.0, 3.0, 4.0]);
    let b = zeros::<f32>(&d, &s, 4);
    c.all_reduce(&a, &b, ReduceOp::Sum, &s).unwrap();
    assert_eq!(b.to_vec_blocking(&s).unwrap(), [1.0, 2.0, 3.0, 4.0]);
    c.all_reduce(&a, &b, ReduceOp::PreMulSum(3.0), &s).unwrap();
    assert_eq!(b.to_vec_blocking(&s).unwrap(), [3.0, 6.0, 9.0, 12.0]);
    // Sizes, roots, peers, overlap, streams: refused with what is wrong.
    let short = zeros::<f32>(&d, &s, 3);
    let e = c.all_reduce(&a, &short, ReduceOp::Sum, &s).unwrap_err().to_string();
    assert!(e.contains("4 elements and the receive data 3"), "{e}");
    let e = c.broadcast(&a, &b, 1, &s).unwrap_err().to_string();
    assert!(e.contains("root 1 is not a rank"), "{e}");
    let e = c.send(&a, 5, &s).unwrap_err().to_string();
    assert!(e.contains("peer 5"), "{e}");
    let e = c.all_gather(&a, &short, &s).unwrap_err().to_string();
    assert!(e.contains("times the 1 ranks"), "{e}");
    let e = c
        .all_reduce(a.slice(0..2).unwrap(), a.slice(1..3).unwrap(), ReduceOp::Sum, &s)
        .unwrap_err()
        .to_string();
    assert!(e.contains("overlap other than in place"), "{e}");
    // Bytes against elements: a 16-byte buffer is 16 u8, not 4 f32.
    let e = c
        .all_reduce(
            a.as_buffer(),
            b.as_buffer().view_as::<u8>().unwrap().slice(0..8).unwrap(),
            ReduceOp::Max,
            &s,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("16 elements and the receive data 8"), "{e}");
    let e = c
        .all_reduce(&a, &b, ReduceOp::Sum, &Stream::legacy_default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a default stream"), "{e}");
    if cuda_core::device_count().unwrap() > 1 {
        let other = stream_on(&Device::new(1).unwrap());
        let e = c.all_reduce(&a, &b, ReduceOp::Sum, &other).unwrap_err().to_string();
        assert!(e.contains("device 0"), "{e}");
        d.set_current().unwrap();
    }
    // A group whose closure fails issues nothing; the communicator still works.
    let err = group(|g| {
        g.all_reduce(c, &a, &b, ReduceOp::Sum, &s)?;
        g.all_reduce(c, &a, &short, ReduceOp::Sum, &s)
    });
    assert!(err.is_err());
    c.all_reduce_in_place(&b, ReduceOp::Max, &s).unwrap();
    c.check().unwrap();
    // NCCL switches devices through the runtime: the thread's current context is as it was
    // after a collective, whether it is the communicator's, or a created context of its device.
    use cuda_core::{Context, ContextFlags};
    let primary = Context::current_handle().unwrap();
    c.all_reduce(&a, &b, ReduceOp::Sum, &s).unwrap();
    assert_eq!(
        Context::current_handle().unwrap(),
        primary,
        "the primary context stays current"
    );
    let created = Context::create(&d, ContextFlags::default()).unwrap();
    created.set_current().unwrap();
    c.all_reduce(&a, &b, ReduceOp::Sum, &s).unwrap();
    group(|g| g.all_reduce(c, &a, &b, ReduceOp::Sum, &s)).unwrap();
    assert_eq!(
        Context::current_handle().unwrap(),
        created.handle(),
        "a created context stays current"
    );
    d.set_current().unwrap();
    s.sync().unwrap();
    assert_eq!(b.to_vec_blocking(&s).unwrap(), [1.0, 2.0, 3.0, 4.0]);
    // UniqueId from NCCL round-trips.
    let id = UniqueId::new().unwrap();
    assert_eq!(UniqueId::from_hex(&id.to_string()).unwrap(), id);
    let comms = comms.into_iter().next().unwrap();
    comms.finalize().unwrap();
}

/// Starts this executable as rank `rank` of `scenario`, connected to `port`.
fn spawn_child(scenario: &str, port: u16, rank: usize, socket_transport: bool) -> Rank {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "nccl_child_rank_helper",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, format!("{scenario}:{port}:{rank}"))
    .env("NCCL_NVLS_ENABLE", "0");
    if socket_transport {
        cmd.env("NCCL_P2P_DISABLE", "1")
            .env("NCCL_SHM_DISABLE", "1")
            .env("NCCL_SOCKET_IFNAME", "lo");
    }
    Rank(cmd.spawn().unwrap())
}

/// Rank 0 of `scenario` in this process (device 0), rank 1 in a child (device 1); on the socket
/// transport both ranks in children. The id goes over a TCP socket on the loopback interface.
fn two_processes(scenario: &str, socket_transport: bool) {
    let _one = cuda_tests::one_at_a_time();
    let Some([d0, _]) = two_devices() else { return };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let id = UniqueId::new().unwrap();
    if socket_transport {
        // NCCL reads its transport settings once per process: both ranks run in children that
        // start with them; this process only hands out the id.
        let mut children: Vec<Rank> = (0..2).map(|r| spawn_child(scenario, port, r, true)).collect();
        for _ in 0..2 {
            let (mut peer, _) = listener.accept().unwrap();
            writeln!(peer, "{id}").unwrap();
        }
        for child in &mut children {
            let status = child.wait();
            assert!(status.success(), "a rank failed: {status}");
        }
        return;
    }
    let mut child = spawn_child(scenario, port, 1, false);
    let (mut peer, _) = listener.accept().unwrap();
    writeln!(peer, "{id}").unwrap();
    let options = CommunicatorOptions {
        watchdog: Some(Duration::from_secs(8)),
    };
    let comm = Communicator::init_with(0, 2, &id, &d0, &options).unwrap();
    run_rank(scenario, comm, &d0, &mut peer, Some(&mut child));
    if scenario != "killed" {
        let status = child.wait();
        assert!(status.success(), "rank 1 failed: {status}");
    }
}

/// What each rank does in `scenario`.
fn run_rank(scenario: &str, comm: Communicator, d: &Device, peer: &mut TcpStream, child: Option<&mut Rank>) {
    match scenario {
        "collectives" => {
            check_collectives(std::slice::from_ref(&comm), std::slice::from_ref(d));
            // The orderly end on both ranks, before the process exits (a communicator dropped
            // just before exit is aborted on the release thread while the process tears down).
            comm.finalize().unwrap();
        }
        "graph" => {
            let s = stream_on(d);
            let data = upload(d, &s, &vec![1.0f32; N]);
            s.sync().unwrap();
            let mut builder = s.create_graph_builder();
            builder
                .begin_building(cuda_core::graph::CaptureMode::ThreadLocal)
                .unwrap();
            comm.all_reduce_in_place(&data, ReduceOp::Sum, builder.stream())
                .unwrap();
            builder.end_building().unwrap();
            let graph = builder.complete(&Default::default()).unwrap();
            drop(builder);
            // The graph holds the communicator: it cannot be aborted meanwhile.
            for _ in 0..3 {
                graph.launch(&s).unwrap();
            }
            assert_eq!(
                data.to_vec_blocking(&s).unwrap(),
                vec![8.0f32; N],
                "three launches double three times"
            );
            drop(graph);
            comm.check().unwrap();
            s.sync().unwrap();
            // The graph is destroyed on the release thread once its launches are done; until
            // then its hold refuses an orderly end. Once the release thread has nothing left,
            // the communicator ends in order, before the process exits (one released in the
            // background while the process tears down NCCL can crash it).
            assert!(
                cuda_tests::releases_drain(Duration::from_secs(20)),
                "the graph was not released"
            );
            comm.finalize().unwrap();
        }
        "killed" => {
            let s = stream_on(d);
            let data = upload(d, &s, &vec![1.0f32; N]);
            comm.all_reduce_in_place(&data, ReduceOp::Sum, &s).unwrap();
            assert_eq!(data.to_vec_blocking(&s).unwrap(), vec![2.0f32; N]);
            if let Some(child) = child {
                // Rank 1 is killed once the first collective is done on both sides.
                let mut line = String::new();
                BufReader::new(peer.try_clone().unwrap()).read_line(&mut line).unwrap();
                assert_eq!(line.trim(), "ready");
                child.0.kill().unwrap();
                child.wait();
                let started = Instant::now();
                comm.all_reduce_in_place(&data, ReduceOp::Sum, &s).unwrap();
                let (tx, rx) = std::sync::mpsc::channel();
                let waiter = s.clone();
                std::thread::spawn(move || tx.send(waiter.sync()));
                let synced = rx.recv_timeout(Duration::from_secs(90));
                assert!(
                    synced.is_ok(),
                    "the survivor's collective hung for 90 s: the watchdog did not abort"
                );
                let e = comm.check().unwrap_err().to_string();
                println!("after {:?}: {e}", started.elapsed());
                assert!(e.contains("watchdog") || e.contains("asynchronous"), "{e}");
                let e = comm
                    .all_reduce_in_place(&data, ReduceOp::Sum, &s)
                    .unwrap_err()
                    .to_string();
                assert!(e.contains("closed"), "{e}");
            } else {
                writeln!(peer, "ready").unwrap();
                std::thread::sleep(CHILD_DEADLINE); // killed meanwhile
            }
        }
        other => panic!("unknown scenario {other}"),
    }
}

#[test]
#[ignore = "needs two GPUs"]
fn nccl_two_processes_every_collective() {
    two_processes("collectives", false);
}

#[test]
#[ignore = "needs two GPUs"]
fn nccl_two_processes_over_the_socket_transport() {
    two_processes("collectives", true);
}

#[test]
#[ignore = "needs two GPUs"]
fn nccl_two_processes_capture_a_collective_and_relaunch_it() {
    two_processes("graph", false);
}

#[test]
#[ignore = "needs two GPUs"]
fn nccl_a_killed_peer_ends_in_an_abort_not_a_hang() {
    two_processes("killed", false);
}

/// Rank 1 of a two-process scenario, when started by one (`NCCL_TEST_ROLE=scenario:port`);
/// nothing otherwise.
#[test]
#[ignore = "a helper the two-process tests start"]
fn nccl_child_rank_helper() {
    let Ok(role) = std::env::var(ROLE) else { return };
    quiet_nccl();
    std::thread::spawn(|| {
        std::thread::sleep(CHILD_DEADLINE);
        eprintln!("rank process: still running after {CHILD_DEADLINE:?}, exiting");
        std::process::exit(3);
    });
    let parts: Vec<&str> = role.split(':').collect();
    let (scenario, port, rank) = (parts[0], parts[1], parts[2].parse::<usize>().unwrap());
    let mut peer = TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
    let mut line = String::new();
    BufReader::new(peer.try_clone().unwrap()).read_line(&mut line).unwrap();
    let id: UniqueId = line.trim().parse().unwrap();
    let d = Device::new(rank).unwrap();
    let comm = Communicator::init(rank, 2, &id, &d).unwrap();
    run_rank(scenario, comm, &d, &mut peer, None);
}
