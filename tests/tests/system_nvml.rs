//! `cuda_core::system` over NVML, and `cuda_core::checkpoint`, on a machine with a GPU: NVML's
//! view of each device against the driver's, queries that answer or say "not supported", the
//! process list, events with their timeouts, and a checkpoint cycle of a child process that holds
//! device memory.

use cuda_core::checkpoint::{self, Process, ProcessState};
use cuda_core::system::{
    self, AffinityScope, ClockId, ClockType, Device as SysDevice, DriverMode, EventType, FieldId, GpuP2PCapsIndex,
    GpuTopologyLevel, InforomObject, NvlinkInfo, NvmlErrorKind, Pstate, SystemEventType, TemperatureThresholds,
    ThermalTarget,
};
use cuda_core::{CudaError, Device, StreamOptions};
use cuda_tests::skip;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `domain:bus:device.function` as numbers: CUDA writes a 4-digit domain, NVML an 8-digit one.
fn pci_parts(id: &str) -> (u32, u32, u32, u32) {
    let parse = |s: &str| u32::from_str_radix(s, 16).unwrap_or_else(|_| panic!("bad PCI bus id {id}"));
    let (domain, rest) = id.split_once(':').unwrap();
    let (bus, rest) = rest.split_once(':').unwrap();
    let (device, function) = rest.split_once('.').unwrap();
    (parse(domain), parse(bus), parse(device), parse(function))
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn identity_matches_the_driver() {
    let cuda_devices = Device::all().unwrap();
    assert!(!cuda_devices.is_empty(), "no CUDA device: these tests need a GPU");
    let count = SysDevice::get_device_count().unwrap();
    assert!(count as usize >= cuda_devices.len(), "NVML sees {count} devices");
    assert_eq!(system::get_num_devices().unwrap(), count as usize);
    for d in &cuda_devices {
        let s = d.to_system_device().unwrap();
        let uuid = s.uuid().unwrap();
        println!(
            "CUDA {} = NVML {}: {} {uuid} {}",
            d.device_id(),
            s.index().unwrap(),
            s.name().unwrap(),
            s.pci_bus_id().unwrap()
        );
        assert!(uuid.starts_with("GPU-"), "{uuid}");
        assert!(s
            .uuid_without_prefix()
            .unwrap()
            .eq_ignore_ascii_case(&d.uuid().unwrap()));
        assert_eq!(pci_parts(&s.pci_bus_id().unwrap()), pci_parts(&d.pci_bus_id().unwrap()));
        assert_eq!(s.name().unwrap(), d.name().unwrap());
        let cc = d.compute_capability().unwrap();
        assert_eq!(s.cuda_compute_capability().unwrap(), (cc.major, cc.minor));
        // The same device however it is selected, and back to the same CUDA device.
        assert_eq!(SysDevice::from_pci_bus_id(&d.pci_bus_id().unwrap()).unwrap(), s);
        assert_eq!(SysDevice::from_uuid(&uuid).unwrap(), s);
        assert_eq!(SysDevice::from_index(s.index().unwrap()).unwrap(), s);
        assert_eq!(s.to_cuda_device().unwrap(), *d);
        // NVML's total is the physical memory; CUDA's leaves out what the driver reserves.
        let m = s.memory_info().unwrap();
        let cuda_total = d.total_memory().unwrap() as u64;
        println!(
            "  memory: CUDA total {cuda_total}, NVML total {} reserved {} used {} free {}",
            m.total, m.reserved, m.used, m.free
        );
        assert!(
            cuda_total == m.total || cuda_total == m.total - m.reserved,
            "CUDA total {cuda_total} is neither NVML's total {} nor total - reserved {}",
            m.total,
            m.total - m.reserved
        );
        assert!(m.used <= m.total && m.free <= m.total);
        let pci = s.pci_info().unwrap();
        println!("  {pci:?}");
        assert_eq!(pci.vendor_id, 0x10de, "{pci:?}");
    }
    // A UUID that names no device, and a malformed one, are NVML errors.
    let e = SysDevice::from_uuid("GPU-00000000-0000-0000-0000-000000000000").unwrap_err();
    println!("unknown UUID: {e} ({:?})", e.nvml_kind());
    assert!(e.nvml_kind().is_some());
}

/// Prints a query's answer; an error must be one NVML names (not supported, no permission, ...).
fn answer<T: std::fmt::Debug>(name: &str, r: cuda_core::Result<T>) -> Option<T> {
    match r {
        Ok(v) => {
            println!("  {name}: {v:?}");
            Some(v)
        }
        Err(e) => {
            let kind = e
                .nvml_kind()
                .unwrap_or_else(|| panic!("{name}: not an NVML error: {e}"));
            assert!(
                matches!(
                    kind,
                    NvmlErrorKind::NotSupported
                        | NvmlErrorKind::NoPermission
                        | NvmlErrorKind::FunctionNotFound
                        | NvmlErrorKind::NotFound
                        | NvmlErrorKind::NoData
                        | NvmlErrorKind::NotReady
                        | NvmlErrorKind::InvalidArgument
                ),
                "{name}: {e}"
            );
            println!("  {name}: {kind}");
            None
        }
    }
}

/// Whether a call was refused before reaching NVML (an argument the headers do not define).
fn t_refused<T>(r: cuda_core::Result<T>) -> bool {
    matches!(r, Err(CudaError::InvalidArgument(_)))
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn every_query_answers_or_says_not_supported() {
    let s = SysDevice::from_index(0).unwrap();
    println!("{s:?}");
    answer("arch", s.arch());
    answer("brand", s.brand().map(|b| b.to_string()));
    answer("serial", s.serial());
    answer("module id", s.module_id());
    answer("minor number", s.minor_number());
    answer("numa node", s.numa_node_id());
    answer("c2c", s.is_c2c_enabled());
    answer("addressing mode", s.addressing_mode());
    answer("persistence", s.is_persistence_mode_enabled());
    answer("display connected", s.is_display_connected());
    answer("display active", s.is_display_active());
    answer("attributes", s.attributes());
    answer("repair status", s.repair_status());
    answer("bar1", s.bar1_memory_info());
    answer("pci", s.pci_info());
    answer("pcie link", s.pcie_link());
    answer("pcie throughput", s.pcie_throughput());
    answer("pcie replays", s.pcie_replay_counter());
    for ty in [ClockType::Graphics, ClockType::Sm, ClockType::Memory, ClockType::Video] {
        let c = s.get_clock(ty);
        let current = answer(&format!("{ty} clock"), c.get_current_mhz());
        let max = answer(&format!("{ty} max"), c.get_max_mhz());
        answer(&format!("{ty} boost max"), c.get_clock_mhz(ClockId::CustomerBoostMax));
        answer(&format!("{ty} customer boost"), c.get_max_customer_boost_mhz());
        answer(&format!("{ty} P0 range"), c.get_min_max_clock_of_pstate_mhz(Pstate::P0));
        answer(&format!("{ty} P0 offsets"), c.get_offsets(Pstate::P0));
        if let (Some(current), Some(max)) = (current, max) {
            assert!(current <= max + max / 10, "{ty}: {current} MHz above its maximum {max}");
        }
    }
    // Values the headers do not define never reach NVML: refused before the call.
    let e = s.get_clock(ClockType::Other(77)).get_current_mhz().unwrap_err();
    assert!(
        e.nvml_kind().is_none() && e.to_string().contains("not a value NVML's headers define"),
        "{e}"
    );
    assert!(t_refused(
        s.temperature().get_threshold(TemperatureThresholds::Other(1000))
    ));
    assert!(t_refused(s.temperature().get_thermal_settings(ThermalTarget::Unknown)));
    assert!(t_refused(s.inforom().get_version(InforomObject::Other(77))));
    assert!(t_refused(s.get_topology_nearest_gpus(GpuTopologyLevel::Other(7))));
    assert!(t_refused(s.register_events(EventType::from_bits_retain(1 << 63))));
    assert!(t_refused(system::get_p2p_status(&s, &s, GpuP2PCapsIndex::Unknown)));
    answer("auto boost", s.is_auto_boosted_clocks_enabled());
    let supported = answer("supported clock reasons", s.supported_clock_event_reasons());
    let current = answer("current clock reasons", s.current_clock_event_reasons());
    if let (Some(supported), Some(current)) = (supported, current) {
        println!("  reasons outside the supported set: {:?}", current - supported);
    }
    let pstate = answer("pstate", s.performance_state());
    let pstates = answer("supported pstates", s.supported_pstates());
    if let Some(all) = &pstates {
        assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
    }
    if let (Some(Some(p)), Some(all)) = (pstate, pstates) {
        assert!(all.is_empty() || all.contains(&p), "P-state {p} not among {all:?}");
    }
    answer("dynamic pstates", s.dynamic_pstates_info());
    if let Some(u) = answer("utilization", s.utilization()) {
        assert!(u.gpu <= 100 && u.memory <= 100);
    }
    let t = s.temperature();
    if let Some(temp) = answer("temperature", t.get_sensor()) {
        assert!((0..=120).contains(&temp), "{temp} C");
    }
    for th in [
        TemperatureThresholds::Shutdown,
        TemperatureThresholds::Slowdown,
        TemperatureThresholds::GpuMax,
        TemperatureThresholds::MemMax,
    ] {
        answer(&format!("threshold {th}"), t.get_threshold(th));
    }
    answer("margin", t.margin());
    answer("thermal settings", t.get_thermal_settings(ThermalTarget::All));
    answer("cooler", s.cooler());
    if let Some(n) = answer("fans", s.num_fans()) {
        for i in 0..n {
            let f = s.get_fan(i);
            answer("fan speed", f.speed());
            answer("fan rpm", f.speed_rpm());
            answer("fan target", f.target_speed());
            answer("fan range", f.min_max_speed());
            answer("fan policy", f.control_policy());
        }
    }
    if let Some(mw) = answer("power", s.power_usage_mw()) {
        if let Some(l) = answer("power limits", s.power_limits()) {
            assert!(l.min <= l.max && l.enforced <= l.max.max(l.enforced));
            assert!(mw < l.max.saturating_mul(2), "{mw} mW against a {} mW limit", l.max);
        }
    }
    answer("power management", s.is_power_management_enabled());
    answer("energy", s.total_energy_consumption_mj());
    answer("power source", s.power_source());
    let mig = s.mig();
    answer("mig device", mig.is_mig_device());
    answer("mig mode", mig.mode());
    answer("mig pending", mig.pending_mode());
    answer("mig count", mig.device_count());
    answer("mig devices", mig.get_all_devices().map(|d| d.len()));
    answer("cpu affinity", s.get_cpu_affinity(AffinityScope::Node).map(|c| c.len()));
    answer("memory affinity", s.get_memory_affinity(AffinityScope::Node));
    answer("socket affinity", s.get_memory_affinity(AffinityScope::Socket));
    answer(
        "nearest (system)",
        s.get_topology_nearest_gpus(GpuTopologyLevel::System).map(|d| d.len()),
    );
    answer(
        "gpus near cpu 0",
        SysDevice::get_all_devices_with_cpu_affinity(0).map(|d| d.len()),
    );
    let mut active = 0;
    for link in 0..NvlinkInfo::MAX_LINKS {
        let l = s.get_nvlink(link).unwrap();
        match l.is_active() {
            Ok(true) => {
                active += 1;
                answer("nvlink version", l.version().map(|v| v.major_minor()));
                answer("nvlink remote", l.remote_pci_bus_id());
            }
            Ok(false) => {}
            Err(e) => {
                // Links past the device's count, or a device without NVLink.
                assert!(e.nvml_kind().is_some(), "{e}");
                if link == 0 {
                    println!("  nvlink 0: {}", e.nvml_kind().unwrap());
                }
                break;
            }
        }
    }
    println!("  nvlinks active: {active}");
    assert!(s.get_nvlink(NvlinkInfo::MAX_LINKS).is_err());
    let fields = s
        .get_field_values(&[
            FieldId::DEV_ECC_CURRENT,
            FieldId::DEV_POWER_INSTANT,
            FieldId::DEV_TEMPERATURE_SLOWDOWN_TLIMIT,
            FieldId::DEV_NVLINK_LINK_COUNT,
            FieldId(u32::MAX - 1),
        ])
        .unwrap();
    assert_eq!(fields.len(), 5);
    for f in &fields {
        println!(
            "  field {:?} (scope {}): {:?}",
            f.field_id,
            f.scope_id,
            f.value().map_err(|e| e.nvml_kind())
        );
    }
    assert!(fields[4].value().is_err(), "a field id NVML does not know has no value");
    assert!(fields.get(4).is_some() && fields.get(5).is_none());
    let inforom = s.inforom();
    answer("inforom image", inforom.image_version());
    answer("inforom oem", inforom.get_version(InforomObject::Oem));
    answer("inforom checksum", inforom.configuration_checksum());
    answer("inforom bbx", inforom.bbx_flush_time());
    answer("board part", inforom.board_part_number());
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn system_queries() {
    let user = system::get_driver_version_full(DriverMode::User).unwrap();
    let kernel = system::get_driver_version_full(DriverMode::Kernel).unwrap();
    println!("CUDA {user}, kernel driver {kernel}");
    assert_eq!(
        (user.major, user.minor),
        system::get_user_mode_driver_version().unwrap()
    );
    assert_eq!(
        system::get_driver_version(DriverMode::Kernel).unwrap(),
        (kernel.major, kernel.minor)
    );
    let text = system::get_kernel_mode_driver_version().unwrap();
    assert!(
        text.starts_with(&format!("{}.{}", kernel.major, kernel.minor)),
        "{text}"
    );
    system::initialize().unwrap();
    let name = system::get_process_name(std::process::id()).unwrap();
    println!("this process: {name:?}");
    assert!(!name.is_empty());
    let devices = SysDevice::get_all_devices().unwrap();
    let (a, b) = (&devices[0], devices.last().unwrap());
    let level = system::get_topology_common_ancestor(a, b);
    println!(
        "common ancestor of {} and {}: {level:?}",
        a.index().unwrap(),
        b.index().unwrap()
    );
    for caps in [GpuP2PCapsIndex::Read, GpuP2PCapsIndex::Write, GpuP2PCapsIndex::Nvlink] {
        let status = system::get_p2p_status(a, b, caps);
        println!("p2p {caps}: {status:?}");
        if let Err(e) = status {
            assert!(e.nvml_kind().is_some(), "{e}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn process_list_includes_this_process_while_it_holds_a_context() {
    let device = Device::new(0).unwrap();
    device.set_current().unwrap();
    let stream = device.create_stream(StreamOptions::default()).unwrap();
    let buffer = device.allocate(64 << 20, &stream).unwrap();
    buffer.fill_u8(7, &stream).unwrap();
    stream.sync().unwrap();
    let s = device.to_system_device().unwrap();
    let me = std::process::id();
    // Namespaced ids of this process (the driver reports the id in the caller's namespace).
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let ns_pids: Vec<u32> = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|l| l.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let list = s.compute_running_processes().unwrap();
        if let Some(p) = list.iter().find(|p| p.pid == me || ns_pids.contains(&p.pid)) {
            println!("found pid {} (this process is {me}, NSpid {ns_pids:?}): {p:?}", p.pid);
            if let Some(bytes) = p.used_gpu_memory {
                assert!(bytes >= 64 << 20, "{bytes} bytes used, the test holds 64 MiB");
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pid {me} (NSpid {ns_pids:?}) not among {list:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(buffer);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn events_return_within_their_timeout() {
    let s = SysDevice::from_index(0).unwrap();
    let supported = s.get_supported_event_types().unwrap();
    println!("supported events: {supported:?}");
    let wanted = supported & (EventType::PSTATE | EventType::CLOCK | EventType::XID_CRITICAL_ERROR);
    let timeout = Duration::from_millis(300);
    if wanted.is_empty() {
        let e = s.register_events(EventType::PSTATE).unwrap_err();
        println!("no event to register ({e})");
        assert_eq!(e.nvml_kind(), Some(NvmlErrorKind::NotSupported), "{e}");
    } else {
        let mut events = s.register_events(wanted).unwrap();
        assert_eq!(events.registered(), wanted);
        for _ in 0..2 {
            let started = Instant::now();
            let event = events.wait(timeout).unwrap();
            let took = started.elapsed();
            println!("device wait: {event:?} after {took:?}");
            assert!(took < timeout + Duration::from_millis(500), "waited {took:?}");
            if let Some(e) = event {
                assert!(wanted.contains(e.event_type), "{e:?}");
                assert_eq!(e.device, Some(s));
            }
        }
    }
    // System events (driver bind/unbind): none happen during the test.
    match system::register_events(SystemEventType::BIND | SystemEventType::UNBIND) {
        Ok(mut events) => {
            let started = Instant::now();
            let got = events.wait(timeout, 4).unwrap();
            let took = started.elapsed();
            println!("system wait: {got:?} after {took:?}");
            assert!(took < timeout + Duration::from_millis(500), "waited {took:?}");
            assert!(
                events.wait(Duration::ZERO, 0).is_err(),
                "a buffer of 0 events is refused"
            );
        }
        Err(e) => {
            println!("system events: {e}");
            assert!(
                matches!(
                    e.nvml_kind(),
                    Some(NvmlErrorKind::NotSupported | NvmlErrorKind::NoPermission | NvmlErrorKind::FunctionNotFound)
                ),
                "{e}"
            );
        }
    }
}

const CHILD_ENV: &str = "CUDA_CORE_CHECKPOINT_CHILD";
const TEST_NAME: &str = "checkpoint_cycle_of_a_child_process";
const WORDS: usize = 16 << 20; // 64 MiB of u32

fn pattern(i: usize) -> u32 {
    (i as u32).wrapping_mul(2_654_435_761) ^ 0xa5a5_a5a5
}

/// The child: fills device memory with a pattern, says so, waits for the parent's go (after
/// the checkpoint cycle), then reads the memory back and checks every word.
fn checkpoint_child() {
    let device = Device::new(0).unwrap();
    device.set_current().unwrap();
    let stream = device.create_stream(StreamOptions::default()).unwrap();
    let data: Vec<u32> = (0..WORDS).map(pattern).collect();
    let buffer = device.allocate(WORDS * 4, &stream).unwrap();
    buffer.copy_from_host(&data, &stream).unwrap();
    stream.sync().unwrap();
    let mut out = std::io::stdout();
    writeln!(out, "CHILD READY {}", std::process::id()).unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "GO", "the parent said {line:?}");
    let back: Vec<u32> = buffer.to_vec(&stream).unwrap();
    let bad = back.iter().enumerate().position(|(i, &w)| w != pattern(i));
    match bad {
        None => writeln!(out, "CHILD PATTERN OK").unwrap(),
        Some(i) => writeln!(out, "CHILD PATTERN BAD at word {i}: {:#x}", back[i]).unwrap(),
    }
    out.flush().unwrap();
}

/// Whether the driver refused the checkpoint API in a way that means "not here": too old, not
/// supported, or not permitted.
fn refused(e: &CudaError) -> bool {
    use cuda_sys::driver::CUresult as R;
    checkpoint::is_not_supported(e)
        || matches!(
            e.driver_status(),
            Some(R::CUDA_ERROR_NOT_PERMITTED | R::CUDA_ERROR_OPERATING_SYSTEM | R::CUDA_ERROR_NOT_SUPPORTED)
        )
}

enum Outcome {
    Done,
    Refused(String),
}

/// The coordinator's half: lock, checkpoint, restore, unlock, checking the state at each step.
fn checkpoint_cycle(pid: u32) -> Result<Outcome, String> {
    let p = Process::new(pid).map_err(|e| e.to_string())?;
    // The driver may refuse the whole API here (under compute-sanitizer, say).
    let state = match p.state() {
        Ok(state) => state,
        Err(e) if refused(&e) => return Ok(Outcome::Refused(format!("state refused: {e}"))),
        Err(e) => return Err(format!("state: {e}")),
    };
    println!("child {pid}: {state}, restore thread {:?}", p.restore_thread_id());
    assert_eq!(state, ProcessState::Running);
    let step = |name: &str, r: cuda_core::Result<()>, then: ProcessState| -> Result<Option<String>, String> {
        let started = Instant::now();
        match r {
            Ok(()) => {
                let state = p.state().map_err(|e| format!("state after {name}: {e}"))?;
                println!("{name}: {:?}, now {state}", started.elapsed());
                if state != then {
                    return Err(format!("after {name} the process is {state}, not {then}"));
                }
                Ok(None)
            }
            Err(e) if refused(&e) => Ok(Some(format!("{name} refused: {e}"))),
            Err(e) => Err(format!("{name}: {e}")),
        }
    };
    if let Some(why) = step("lock", p.lock(Some(Duration::from_secs(10))), ProcessState::Locked)? {
        return Ok(Outcome::Refused(why));
    }
    if let Some(why) = step("checkpoint", p.checkpoint(), ProcessState::Checkpointed)? {
        p.unlock()
            .map_err(|e| format!("unlock after a refused checkpoint: {e}"))?;
        return Ok(Outcome::Refused(why));
    }
    // The child's GPU memory is released while it is checkpointed.
    if let Ok(s) = SysDevice::from_index(0) {
        let listed = s.compute_running_processes().map(|l| l.iter().any(|x| x.pid == pid));
        println!("child listed by NVML while checkpointed: {listed:?}");
    }
    if let Some(why) = step("restore", p.restore(&[]), ProcessState::Locked)? {
        return Err(why);
    }
    if let Some(why) = step("unlock", p.unlock(), ProcessState::Running)? {
        return Err(why);
    }
    Ok(Outcome::Done)
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn checkpoint_cycle_of_a_child_process() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return checkpoint_child();
    }
    // Restore needs persistence mode or cuInit in the coordinator.
    assert!(cuda_core::device_count().unwrap() > 0);
    // A process cannot checkpoint itself (locking would hang its own CUDA calls).
    let e = Process::new(std::process::id()).unwrap_err();
    assert!(e.to_string().contains("cannot checkpoint itself"), "{e}");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            TEST_NAME,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_for = |prefix: &str, within: Duration| -> Option<String> {
        let deadline = Instant::now() + within;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match lines.recv_timeout(left) {
                // libtest prints "test NAME ... " with no newline before the test's own output.
                Ok(line) if line.contains(prefix) => return line.find(prefix).map(|at| line[at..].to_string()),
                Ok(line) => println!("child: {line}"),
                Err(_) => return None,
            }
        }
        None
    };
    if wait_for("CHILD READY", Duration::from_secs(60)).is_none() {
        let _ = child.kill();
        panic!("the child did not get ready: {:?}", child.wait());
    }
    let pid = child.id();
    // Held past the child's end: once it has exited, calls naming it are refused before the
    // driver (its id may belong to another task by then, a thread of this process included).
    let watched = Process::new(pid).unwrap();
    // The driver calls can block in the driver where the platform cannot complete them: run them
    // on a thread, and give up (killing the child) after a minute.
    let (done_tx, done) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(checkpoint_cycle(pid));
    });
    let outcome = match done.recv_timeout(Duration::from_secs(60)) {
        Ok(outcome) => outcome,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            return skip("the checkpoint cycle did not complete within a minute on this driver");
        }
    };
    let mut stdin = child.stdin.take().unwrap();
    match outcome {
        Ok(Outcome::Done) => {}
        Ok(Outcome::Refused(why)) => {
            let _ = writeln!(stdin, "GO");
            drop(stdin);
            let _ = child.wait();
            return skip(format!("the driver refuses to checkpoint here: {why}"));
        }
        Err(why) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("checkpoint cycle failed: {why}");
        }
    }
    writeln!(stdin, "GO").unwrap();
    drop(stdin);
    let verdict = wait_for("CHILD PATTERN", Duration::from_secs(60));
    let status = child.wait().unwrap();
    assert_eq!(verdict.as_deref(), Some("CHILD PATTERN OK"), "child exit {status:?}");
    assert!(status.success(), "child exit {status:?}");
    let e = watched.lock(Some(Duration::from_secs(1))).unwrap_err();
    assert!(e.to_string().starts_with(&format!("process {pid} has exited")), "{e}");
    assert_eq!(e.driver_status(), None, "{e}");
    println!("checkpoint cycle of child {pid}: lock, checkpoint, restore, unlock; its 64 MiB pattern survived; the exited child is refused: {e}");
}
