//! `cargo xtask test`: the project's test command, for a fresh machine with no CUDA toolkit.
//!
//! It makes a Python virtual environment in `.cuda-venv/` holding NVIDIA's compiler and runtime
//! wheels (pinned to the version the headers come from), then runs `cargo test --workspace
//! --all-features` (optional bridges such as `ndarray` included) with
//! `VIRTUAL_ENV` pointing at it, the way `cuda-pathfinder` finds wheels for any user.
//! `CUDA_RS_REQUIRE_WHEELS=1` makes the tests that need those libraries fail, not skip, when they
//! are not found.

use crate::util::{self, Result};
use std::path::Path;
use std::process::Command;

/// The wheels the CPU tests load. The `-cu12` ones prove that CUDA 12 libraries work as well.
pub fn wheels() -> Vec<String> {
    let v = crate::vendor::TOOLKIT_VERSION;
    vec![
        format!("nvidia-cuda-nvrtc=={v}"),
        format!("nvidia-nvjitlink=={v}"),
        format!("nvidia-nvvm=={v}"),
        format!("nvidia-cuda-runtime=={v}"),
        "nvidia-cuda-nvrtc-cu12==12.9.86".to_string(),
    ]
}

pub fn run(args: &[String]) -> Result {
    let mut args = args.to_vec();
    if args.first().map(String::as_str) == Some("--") {
        args.remove(0);
    }
    let mut cmd = cargo_with_wheels()?;
    util::run(
        cmd.args(["test", "--workspace", "--all-features"])
            .args(&args)
            .env("CUDA_RS_REQUIRE_WHEELS", "1"),
    )
}

/// A `cargo` command in the workspace root whose programs find the wheels of `.cuda-venv/`
/// (installed first if needed).
pub fn cargo_with_wheels() -> Result<Command> {
    let root = util::root();
    let venv = root.join(".cuda-venv");
    install_wheels(&venv)?;
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(&root).env("VIRTUAL_ENV", &venv);
    Ok(cmd)
}

/// Creates `venv` and installs [`wheels`] into it, unless a previous run already did.
pub fn install_wheels(venv: &Path) -> Result {
    let wanted = wheels().join("\n");
    let stamp = venv.join("cuda-rs-wheels.txt");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(());
    }
    if !venv.join("bin/python").exists() {
        println!("creating {}", venv.display());
        util::run(Command::new(util::python()).args(["-m", "venv"]).arg(venv))
            .map_err(|e| format!("{e}\n(cargo xtask test needs python3 with the venv module)"))?;
    }
    println!("installing {}", wheels().join(", "));
    util::run(
        Command::new(venv.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--only-binary=:all:",
            ])
            .args(wheels()),
    )
    .map_err(|e| format!("{e}\n(the wheels come from PyPI)"))?;
    util::write(&stamp, wanted.as_bytes())
}

/// `cargo xtask quickstart`: the example of `crates/cuda-core/examples/quickstart.rs`, with the
/// compiler wheels available (a machine needs only the NVIDIA driver).
pub fn quickstart(args: &[String]) -> Result {
    util::no_more(args)?;
    let mut cmd = cargo_with_wheels()?;
    util::run(cmd.args([
        "run",
        "--quiet",
        "--release",
        "--package",
        "cuda-core",
        "--example",
        "quickstart",
    ]))
}
