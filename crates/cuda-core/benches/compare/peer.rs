//! The sides in other processes: the C program and the Python script as long-lived child
//! servers, and the fresh processes of the process rows.

use crate::children::Children;
use crate::measure::{Arch, Column, Contender, Op};
use crate::Setup;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

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

/// A child process that answers one request line with one figure line.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Server {
    fn start(program: &[OsString], cubin: &std::path::Path) -> std::io::Result<Server> {
        let mut child = Command::new(&program[0])
            .args(&program[1..])
            .arg("serve")
            .arg(cubin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Ok(Server { child, stdin, stdout })
    }

    /// The figure for `request`: `Ok(None)` for "-" (an operation the server does not have).
    fn ask(&mut self, request: &str) -> std::io::Result<Option<f64>> {
        writeln!(self.stdin, "{request}")?;
        self.stdin.flush()?;
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("it exited"));
        }
        match line.trim() {
            "-" => Ok(None),
            figure => figure.parse().map(Some).map_err(std::io::Error::other),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Its stdin closes with it, which ends its loop; wait so no zombie is left.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The C program or the Python script: a server for the loops, and a fresh process per first
/// compile.
pub struct Peer {
    column: Column,
    /// The program and its leading arguments (`compare_c`, or `python3 compare.py`).
    program: Vec<OsString>,
    /// `None` once it failed (said on stderr): the column then has no more figures.
    server: Option<Server>,
    source: std::path::PathBuf,
    children: Children,
}

impl Peer {
    /// The C program the bundle's run.sh compiled (`CUDA_CORE_BENCH_C`), if any.
    pub fn c(setup: &Setup) -> Option<Peer> {
        let program = vec![std::env::var_os("CUDA_CORE_BENCH_C")?];
        Peer::start(Column::C, program, setup)
    }

    /// The Python script (`CUDA_CORE_BENCH_PYTHON_SCRIPT`) under the interpreter run.sh found
    /// cuda.core in (`CUDA_CORE_BENCH_PYTHON`), if any.
    pub fn python(setup: &Setup) -> Option<Peer> {
        let program = vec![
            std::env::var_os("CUDA_CORE_BENCH_PYTHON")?,
            std::env::var_os("CUDA_CORE_BENCH_PYTHON_SCRIPT")?,
        ];
        Peer::start(Column::Python, program, setup)
    }

    /// The raw side in a process of its own: this executable as a server (see `children`).
    pub fn raw_alone(setup: &Setup) -> Option<Peer> {
        let program = vec![std::env::current_exe().ok()?.into_os_string()];
        Peer::start(Column::RawAlone, program, setup)
    }

    fn start(column: Column, program: Vec<OsString>, setup: &Setup) -> Option<Peer> {
        let server = Server::start(&program, &setup.children.cubin_path)
            .map_err(|e| eprintln!("compare: cannot start the {} side {program:?}: {e}", column.title()))
            .ok()?;
        Some(Peer {
            column,
            program,
            server: Some(server),
            source: setup.source_path.clone(),
            children: setup.children.clone(),
        })
    }

    fn first_compile(&self) -> Option<f64> {
        let mut command = Command::new(&self.program[0]);
        command
            .args(&self.program[1..])
            .arg("first-compile")
            .arg(&self.source)
            .arg(&self.children.sm);
        if self.column == Column::C {
            self.children.with_parents_nvrtc(&mut command);
        }
        child_ms(command)
    }
}

impl Contender for Peer {
    fn column(&self) -> Column {
        self.column
    }

    fn measure(&mut self, op: Op) -> Option<f64> {
        if let Op::FirstCompile(Arch::Given) = op {
            // The raw side's own process compiles in the Raw column's rows already.
            return (self.column != Column::RawAlone)
                .then(|| self.first_compile())
                .flatten();
        }
        let request = op.request()?;
        match self.server.as_mut()?.ask(&request) {
            Ok(figure) => figure,
            Err(e) => {
                eprintln!("compare: the {} side failed on `{request}`: {e}", self.column.title());
                self.server = None;
                None
            }
        }
    }
}
