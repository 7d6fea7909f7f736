//! What checkpointing checks before the driver, without a GPU.

use super::*;

#[test]
fn processes_cross_threads() {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Process>();
    send_and_sync::<GpuUuid>();
}

#[test]
fn pids_are_positive_ints() {
    assert_eq!(Process::new(1).unwrap().pid(), 1);
    for bad in [0, u32::MAX, i32::MAX as u32 + 1] {
        let e = Process::new(bad).unwrap_err();
        assert!(e.to_string().contains("pid must be a positive int"), "{e}");
    }
}

#[test]
fn the_calling_process_and_its_threads_are_refused() {
    let e = Process::new(std::process::id()).unwrap_err();
    assert!(e.to_string().contains("cannot checkpoint itself"), "{e}");
    // A thread of this process, by its thread id, while it runs.
    let other_thread = std::thread::spawn(|| {
        // SAFETY: gettid has no preconditions.
        let mine = unsafe { libc::gettid() };
        (mine, Process::new(mine as u32).map(|p| p.pid()))
    });
    let (thread_id, result) = other_thread.join().unwrap();
    assert!(thread_id > 0 && thread_id as u32 != std::process::id());
    if thread_group_of(std::process::id()).is_some() {
        let e = result.unwrap_err();
        assert!(e.to_string().contains("cannot checkpoint itself"), "{e}");
    }
    // Another process is accepted.
    let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
    let accepted = Process::new(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(accepted.unwrap().pid(), child.id());
}

/// Every call that hands the id to the driver, with what each returned.
fn every_call(p: &Process) -> Vec<(&'static str, Result<()>)> {
    vec![
        ("state", p.state().map(drop)),
        ("restore_thread_id", p.restore_thread_id().map(drop)),
        ("lock", p.lock(Some(Duration::from_secs(1)))),
        ("checkpoint", p.checkpoint()),
        ("restore", p.restore(&[])),
        ("unlock", p.unlock()),
    ]
}

#[test]
fn a_process_that_exited_is_refused_before_the_driver() {
    let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let process = Process::new(child.id()).unwrap();
    let clone = process.clone();
    assert_eq!(clone, process);
    assert_eq!(process.target().unwrap() as u32, child.id());
    if process.pidfd.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        println!("no pidfd here (pidfd_open unsupported): only the per-call check of this process");
        return;
    }
    child.kill().unwrap();
    // Exited but not reaped yet (a zombie, whose id no task can take): refused already.
    let start = std::time::Instant::now();
    while process.target().is_ok() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the pidfd never said the child exited"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Reaped: the id is free for any new task, a thread of this process included. Each call
    // is refused by the check, before the driver (without a driver, reaching it would be a
    // load error instead).
    child.wait().unwrap();
    for p in [&process, &clone] {
        for (call, result) in every_call(p) {
            let e = result.unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("process {} has exited", child.id())),
                "{call}: {e}"
            );
            assert!(e.load_error().is_none() && e.driver_status().is_none(), "{call}: {e}");
        }
    }
    // A new Process of a reaped child: no process has the id (unless a new task took it).
    if let Err(e) = Process::new(child.id()) {
        assert!(
            e.to_string().contains("no process has the id") || e.to_string().contains("cannot checkpoint itself"),
            "{e}"
        );
    }
}

#[test]
fn an_id_that_became_a_thread_of_this_process_is_refused_in_every_call() {
    // A Process whose id is now a thread of this process (what a reused id looks like; made
    // directly, as `new` refuses it): every call refuses it before the driver.
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        let _ = done_rx.recv();
    });
    let tid = tid_rx.recv().unwrap();
    let reused = Process { pid: tid, pidfd: None };
    let results = every_call(&reused);
    drop(done_tx);
    thread.join().unwrap();
    if !std::path::Path::new("/proc/self/task").exists() {
        return; // no procfs: only this process's own id is recognised
    }
    for (call, result) in results {
        let e = result.unwrap_err();
        assert!(e.to_string().contains("cannot checkpoint itself"), "{call}: {e}");
        assert!(e.load_error().is_none() && e.driver_status().is_none(), "{call}: {e}");
    }
    // This process's own id likewise.
    let me = Process {
        pid: std::process::id() as i32,
        pidfd: None,
    };
    assert!(me
        .lock(None)
        .unwrap_err()
        .to_string()
        .contains("cannot checkpoint itself"));
}

#[test]
fn uuids_parse_as_cuda_writes_them() {
    let text = "3a6a1c8e-2f0e-5d44-b1c4-0d1e2f3a4b5c";
    let uuid: GpuUuid = text.parse().unwrap();
    assert_eq!(uuid.to_string(), text);
    assert_eq!(format!("GPU-{text}").parse::<GpuUuid>().unwrap(), uuid);
    assert_eq!(text.replace('-', "").parse::<GpuUuid>().unwrap(), uuid);
    let raw: driver::CUuuid = uuid.into();
    assert_eq!(GpuUuid::from(raw), uuid);
    for bad in [
        "",
        "3a6a1c8e",
        "zz6a1c8e-2f0e-5d44-b1c4-0d1e2f3a4b5c",
        "é6a1c8e-2f0e-5d44-b1c4-0d1e2f3a4b5c",
        "+a6a1c8e-2f0e-5d44-b1c4-0d1e2f3a4b5c",
        "3a6a1c8e-2f0e-5d44-b1c4-0d1e2f3a4b+c",
        "3a6a1c8e-2f0e-5d44-b1c4-0d1e2f3a4b c",
    ] {
        let e = bad.parse::<GpuUuid>().unwrap_err();
        assert!(e.to_string().contains("32 hex characters"), "{e}");
    }
}

#[test]
fn states_and_unsupported_drivers() {
    use driver::CUprocessState_enum as S;
    use driver::CUresult as R;
    assert_eq!(
        ProcessState::from_raw(S::CU_PROCESS_STATE_LOCKED).unwrap(),
        ProcessState::Locked
    );
    assert_eq!(ProcessState::Checkpointed.to_string(), "checkpointed");
    assert!(ProcessState::from_raw(driver::CUprocessState_enum(99)).is_err());
    // A function that could not be loaded is the driver that cannot checkpoint: the status
    // `LoadError::to_status` encodes (0x7C, the library, the function's index).
    let encoded = 0x7C00_0000 | (cuda_sys::LibraryId::Driver as u32) << 16;
    let missing = cuda_sys::LoadError::from_status(encoded).expect("an encoded load error");
    let e = check(
        R(missing.to_status()),
        "cuCheckpointProcessLock",
        unsupported!("cuCheckpointProcessLock"),
    )
    .unwrap_err();
    assert!(is_not_supported(&e), "{e}");
    assert!(e
        .to_string()
        .contains("CUDA checkpointing is not supported by the installed NVIDIA driver"));
    // A 12.8 driver's NOT_SUPPORTED or NOT_FOUND, and any other status, is what it is.
    for status in [
        R::CUDA_ERROR_NOT_SUPPORTED,
        R::CUDA_ERROR_NOT_FOUND,
        R::CUDA_ERROR_INVALID_VALUE,
    ] {
        let e = check(
            status,
            "cuCheckpointProcessLock",
            unsupported!("cuCheckpointProcessLock"),
        )
        .unwrap_err();
        assert!(!is_not_supported(&e), "{e}");
        assert_eq!(e.driver_status(), Some(status));
        assert!(e.to_string().starts_with("cuCheckpointProcessLock: CUDA_ERROR_"), "{e}");
        assert!(!e.to_string().contains("upgrade"), "{e}");
    }
}

#[test]
fn without_a_driver_the_error_says_checkpointing_is_unavailable() {
    if cuda_pathfinder::load_nvidia_dynamic_lib("cuda").is_ok() {
        return; // the GPU suite runs the real cycle
    }
    let e = Process::new(1).unwrap().state().unwrap_err();
    assert!(e.load_error().is_some(), "{e}");
}
