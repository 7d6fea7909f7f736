//! Every side runs in a process of its own (see main's module doc): a long-lived child server
//! per column (the C program, this executable for cuda-core, raw Rust and cudarc, the Python
//! script), which answers one request line with one figure line, and the fresh processes of the
//! process rows, which this process starts itself.

use crate::children::Children;
use crate::measure::{self, Arch, Column, Op};
use crate::Setup;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// What a child prints, with [`monotonic_ns`], when it reaches what its row measures (the kernel
/// finished, the cubin in memory): the time from its start to there, not its teardown, is the
/// sample.
pub const MILESTONE: &str = "milestone ";
/// What a child may print first, when its sample starts later than its process (the Python
/// interpreter's start and imports are not cuda.core's cost).
const BEGIN: &str = "begin ";

/// The system's monotonic clock, in nanoseconds: one clock for the parent and its children
/// (Rust, C and Python alike).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: out-pointer to a local; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Reports the milestone to the parent (see [`child_ms`]).
pub fn milestone() {
    println!("{MILESTONE}{}", monotonic_ns());
}

/// Milliseconds from starting `command` (or from the `begin` it reports) to the milestone it
/// reports; `None`, said on stderr, when it fails or reports none.
pub fn child_ms(mut command: Command) -> Option<f64> {
    let start = monotonic_ns();
    let out = match command.stderr(Stdio::inherit()).output() {
        Ok(out) if out.status.success() => out,
        Ok(out) => return failed(&command, &out.status.to_string()),
        Err(e) => return failed(&command, &e.to_string()),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix)?.trim().parse::<u64>().ok())
    };
    let Some(reached) = report(MILESTONE) else {
        return failed(&command, "no milestone reported");
    };
    Some(reached.saturating_sub(report(BEGIN).unwrap_or(start)) as f64 / 1e6)
}

fn failed(command: &Command, why: &str) -> Option<f64> {
    eprintln!("compare: the child {command:?} failed: {why}");
    None
}

/// A child process that answers one request line with one figure line ("-" for an operation it
/// does not have).
struct Server {
    /// The column's title, for messages.
    name: &'static str,
    child: Child,
    /// `None` once closed: the server's loop ends at the end of its input.
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Whether it has answered a request (its setup is over).
    answered: bool,
}

/// How long a server may take to answer a request (its first answer comes after its setup: a
/// context, 256 MiB of pinned memory, Python's imports; a sample takes milliseconds) before its
/// column is given up, so that a server that hangs cannot hang the benchmark.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a server may take to exit once its input is closed (the safe side removes its
/// program cache's folder then) before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(10);

impl Server {
    fn start(name: &'static str, mut command: Command) -> std::io::Result<Server> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Ok(Server {
            name,
            child,
            stdin,
            stdout,
            answered: false,
        })
    }

    /// Closes its input, which ends its loop; dropping it then waits for it.
    fn close(&mut self) {
        drop(self.stdin.take());
    }

    /// The figure for `request`: `Ok(None)` for "-" (an operation the server does not have).
    fn ask(&mut self, request: &str) -> std::io::Result<Option<f64>> {
        let stdin = self.stdin.as_mut().ok_or_else(|| std::io::Error::other("closed"))?;
        writeln!(stdin, "{request}")?;
        stdin.flush()?;
        if !self.answer_ready()? {
            return Err(std::io::Error::other(format!(
                "no answer in {} s",
                ANSWER_TIMEOUT.as_secs()
            )));
        }
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("it exited"));
        }
        self.answered = true;
        match line.trim() {
            "-" => Ok(None),
            figure => figure
                .parse()
                .map(Some)
                .map_err(|_| std::io::Error::other(format!("it answered {figure:?}"))),
        }
    }
}

impl Server {
    /// Whether an answer (or the end of its output) comes within [`ANSWER_TIMEOUT`].
    fn answer_ready(&self) -> std::io::Result<bool> {
        use std::os::fd::AsRawFd;
        if !self.stdout.buffer().is_empty() {
            return Ok(true);
        }
        let mut fd = libc::pollfd {
            fd: self.stdout.get_ref().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one live pollfd, its count 1.
            let ready = unsafe { libc::poll(&mut fd, 1, ANSWER_TIMEOUT.as_millis() as libc::c_int) };
            if ready >= 0 {
                return Ok(ready > 0);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for Server {
    /// Closes its input, which ends its loop, and waits for it (so no zombie is left and its
    /// objects' teardown is over); kills it if it takes longer than [`EXIT_GRACE`]. Says how it
    /// ended when that was not a success (a server that failed to start exits with 1).
    fn drop(&mut self) {
        self.close();
        let deadline = Instant::now() + EXIT_GRACE;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                Ok(None) | Err(_) => {
                    eprintln!("compare: the {} server did not exit; killed", self.name);
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
            }
        };
        if let Some(status) = status.filter(|s| !s.success()) {
            eprintln!("compare: the {} server ended with {status}", self.name);
        }
    }
}

/// How a side's programs are started.
enum Program {
    /// The C program or the Python script (with its interpreter): `serve CUBIN` answers the
    /// [`common_request`](Op::common_request)s, `first-compile SOURCE SM` is a first compile.
    Foreign(Vec<OsString>),
    /// This executable: `serve CUBIN SIDE` answers every [`request`](Op::request), and the
    /// process rows' children are this executable in a child mode (see `children`).
    Ours(&'static str),
}

/// One column: its server for the loops (one instance after another, see [`restart`]), and the
/// fresh processes of its process rows.
pub struct Peer {
    column: Column,
    program: Program,
    /// `None` once it failed (said on stderr): the column then has no more figures, and no
    /// restart.
    server: Option<Server>,
    /// The instances of its server that answered a request, the one running included.
    instances: usize,
    source: std::path::PathBuf,
    children: Children,
}

impl Peer {
    /// The C program the bundle's run.sh compiled (`CUDA_CORE_BENCH_C`), if any.
    pub fn c(setup: &Setup) -> Option<Peer> {
        let program = vec![std::env::var_os("CUDA_CORE_BENCH_C")?];
        Peer::start(Column::C, Program::Foreign(program), setup)
    }

    /// The Python script (`CUDA_CORE_BENCH_PYTHON_SCRIPT`) under the interpreter run.sh found
    /// cuda.core in (`CUDA_CORE_BENCH_PYTHON`), if any.
    pub fn python(setup: &Setup) -> Option<Peer> {
        let program = vec![
            std::env::var_os("CUDA_CORE_BENCH_PYTHON")?,
            std::env::var_os("CUDA_CORE_BENCH_PYTHON_SCRIPT")?,
        ];
        Peer::start(Column::Python, Program::Foreign(program), setup)
    }

    /// One of this executable's sides (`safe`, `raw`, `cudarc`) in a server of its own.
    pub fn ours(column: Column, side: &'static str, setup: &Setup) -> Option<Peer> {
        Peer::start(column, Program::Ours(side), setup)
    }

    fn start(column: Column, program: Program, setup: &Setup) -> Option<Peer> {
        let mut peer = Peer {
            column,
            program,
            server: None,
            instances: 0,
            source: setup.source_path.clone(),
            children: setup.children.clone(),
        };
        peer.server = Some(peer.start_server().map_err(|e| peer.cannot("start", e)).ok()?);
        Some(peer)
    }

    /// A new instance of its server (which makes its objects, and answers once they are made).
    fn start_server(&self) -> std::io::Result<Server> {
        let cubin = &self.children.cubin_path;
        let command = match &self.program {
            Program::Foreign(words) => {
                let mut command = Command::new(&words[0]);
                command.args(&words[1..]).arg("serve").arg(cubin);
                command
            }
            Program::Ours(side) => {
                let mut command = Command::new(std::env::current_exe()?);
                command.arg("serve").arg(cubin).arg(side);
                if let Some(cpus) = measure::all_cpus_text() {
                    command.env(measure::ALL_CPUS_VAR, cpus);
                }
                command
            }
        };
        Server::start(self.column.title(), command)
    }

    fn cannot(&self, what: &str, e: std::io::Error) {
        eprintln!("compare: cannot {what} the {} side: {e}", self.column.title());
    }

    pub fn column(&self) -> Column {
        self.column
    }

    /// How many instances of its server answered a request.
    pub fn instances(&self) -> usize {
        self.instances
    }

    /// One sample of a process row from a fresh process, for the rows this side has: all
    /// three for cuda-core and raw Rust, the first compile for the others.
    fn fresh_process(&self, op: Op) -> Option<f64> {
        match (&self.program, self.column, op) {
            (Program::Foreign(words), _, Op::FirstCompile(Arch::Given)) => {
                let mut command = Command::new(&words[0]);
                command
                    .args(&words[1..])
                    .arg("first-compile")
                    .arg(&self.source)
                    .arg(&self.children.sm);
                if self.column == Column::C {
                    self.children.with_parents_nvrtc(&mut command);
                }
                child_ms(command)
            }
            (Program::Ours(side), Column::Safe | Column::Raw, Op::FirstKernel | Op::FirstCompile(_))
            | (Program::Ours(side), Column::Cudarc, Op::FirstCompile(Arch::Given)) => self.children.sample(op, side),
            _ => None,
        }
    }

    /// One sample of `op` in its row's unit, or `None` where this side has no such operation
    /// (or its server failed).
    pub fn measure(&mut self, op: Op) -> Option<f64> {
        if op.is_process() {
            return self.fresh_process(op);
        }
        let request = match self.program {
            Program::Foreign(_) => op.common_request()?,
            Program::Ours(_) => op.request()?,
        };
        let server = self.server.as_mut()?;
        let first = !server.answered;
        match server.ask(&request) {
            Ok(figure) => {
                self.instances += usize::from(first);
                figure
            }
            Err(e) => {
                eprintln!("compare: the {} side failed on `{request}`: {e}", self.column.title());
                self.server = None;
                None
            }
        }
    }
}

/// Ends every side's server and starts a new instance of each, so that a column's samples come
/// from several processes (see main's module doc for why). All of them together: every input is
/// closed first, then each is waited for (they exit side by side: their objects' teardown), and
/// only then the new ones start, side by side too, on a machine without the old ones. A side
/// whose server failed stays without one (its column "-"); one that cannot start again ends its
/// column, said on stderr, as does one whose new instance fails its setup (at its first request).
/// The caller's next request to each is untimed: it waits for the server's setup and warms it
/// (see [`interleave`](measure::interleave)).
pub fn restart(sides: &mut [Peer]) {
    let mut running: Vec<&mut Peer> = sides.iter_mut().filter(|side| side.server.is_some()).collect();
    let mut old: Vec<Server> = running.iter_mut().filter_map(|side| side.server.take()).collect();
    old.iter_mut().for_each(Server::close);
    // Waits for each (see `Server`'s drop).
    drop(old);
    for side in running {
        side.server = side.start_server().map_err(|e| side.cannot("restart", e)).ok();
    }
}
