//! A one-screen summary of every GPU, in the manner of `nvidia-smi`, from `cuda_core::system`
//! alone (NVML; no CUDA context is created). Values a device does not report show as `N/A`.
//!
//! `cargo run -p cuda-core --example system_summary`
mod common;
use common::main_with;
use cuda_core::system::{
    self, get_p2p_status, get_topology_common_ancestor, ClockType, Device, DriverMode, FieldId, GpuP2PCapsIndex,
    NvlinkInfo, TemperatureThresholds,
};
use cuda_core::{CudaError, Result};
use std::fmt::Display;

/// A value, or `N/A` when the device does not report it (any other error is shown as such).
fn show<T: Display>(value: Result<T>) -> String {
    match value {
        Ok(v) => v.to_string(),
        Err(e) if e.nvml_kind().is_some() => "N/A".into(),
        Err(e) => format!("error: {e}"),
    }
}

fn mib(bytes: u64) -> u64 {
    bytes >> 20
}

fn main() {
    main_with(|| {
        let driver = system::get_kernel_mode_driver_version()?;
        let cuda = system::get_driver_version_full(DriverMode::User)?;
        println!(
            "driver {driver} ({})   CUDA {}.{}   NVML {}",
            show(system::get_driver_branch()),
            cuda.major,
            cuda.minor,
            show(system::get_nvml_version())
        );
        let devices = Device::get_all_devices()?;
        println!("{} GPU(s)", devices.len());
        let rule = "-".repeat(100);
        println!("{rule}");
        println!(
            "{:<3} {:<26} {:<17} {:>5} {:>4} {:>15} {:>19} {:>4} {:>4}",
            "GPU", "Name", "Bus-Id", "Temp", "Perf", "Power (W)", "Memory (MiB)", "Util", "Fan"
        );
        println!("{rule}");
        for device in &devices {
            summary(device)?;
        }
        println!("{rule}");
        processes(&devices)?;
        if devices.len() > 1 {
            topology(&devices);
        }
        Ok(())
    })
}

/// Two lines per device: the table row, then clocks, links and modes.
fn summary(device: &Device) -> Result<()> {
    let memory = device.memory_info()?;
    let power = match (device.power_usage_mw(), device.power_limits()) {
        (Ok(now), Ok(limits)) => format!("{:.0} / {:.0}", now as f64 / 1e3, limits.enforced as f64 / 1e3),
        (now, _) => show(now.map(|mw| format!("{:.0}", mw as f64 / 1e3))),
    };
    let fan = match device.num_fans() {
        Ok(0) | Err(_) => "N/A".to_string(),
        Ok(_) => show(device.get_fan(0).speed().map(|s| format!("{s}%"))),
    };
    println!(
        "{:<3} {:<26} {:<17} {:>5} {:>4} {:>15} {:>19} {:>4} {:>4}",
        device.index()?,
        truncate(&device.name()?, 26),
        device.pci_bus_id()?,
        show(device.temperature().get_sensor().map(|t| format!("{t}C"))),
        show(
            device
                .performance_state()
                .map(|p| p.map_or("?".to_string(), |p| p.to_string()))
        ),
        power,
        format!("{} / {}", mib(memory.used), mib(memory.total)),
        show(device.utilization().map(|u| format!("{}%", u.gpu))),
        fan,
    );
    let sm = device.get_clock(ClockType::Sm);
    let mem = device.get_clock(ClockType::Memory);
    let link = device.pcie_link();
    let nvlinks = (0..NvlinkInfo::MAX_LINKS)
        .filter(|&l| device.get_nvlink(l).and_then(|n| n.is_active()).unwrap_or(false))
        .count();
    let (cc_major, cc_minor) = device.cuda_compute_capability()?;
    println!(
        "    {} sm_{cc_major}{cc_minor}  SM {}/{} MHz  mem {}/{} MHz  PCIe {}  NVLink {nvlinks} up  \
         persistence {}  MIG {}  ECC {}  slowdown {}",
        show(device.arch()),
        show(sm.get_current_mhz()),
        show(sm.get_max_mhz()),
        show(mem.get_current_mhz()),
        show(mem.get_max_mhz()),
        show(link.map(|l| format!("gen{} x{}", l.current_generation, l.current_width))),
        show(device.is_persistence_mode_enabled().map(on_off)),
        show(device.mig().mode().map(on_off)),
        ecc(device),
        show(
            device
                .temperature()
                .get_threshold(TemperatureThresholds::Slowdown)
                .map(|t| format!("{t}C"))
        ),
    );
    Ok(())
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// Whether ECC is on, from a field value.
fn ecc(device: &Device) -> String {
    let value = device.get_field_values(&[FieldId::DEV_ECC_CURRENT]).and_then(|v| {
        v.get(0)
            .ok_or_else(|| CudaError::InvalidArgument("NVML returned no ECC reading".into()))?
            .value()
    });
    show(value.map(|v| on_off(v.as_integer() == Some(1))))
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// The compute processes of every device, with their names.
fn processes(devices: &[Device]) -> Result<()> {
    println!("Processes:");
    let mut any = false;
    for device in devices {
        let list = match device.compute_running_processes() {
            Ok(list) => list,
            Err(e) if e.nvml_kind().is_some() => {
                println!("  GPU {}: {}", device.index()?, show::<u32>(Err(e)));
                continue;
            }
            Err(e) => return Err(e),
        };
        for p in list {
            any = true;
            println!(
                "  GPU {}  pid {:>8}  {:>8} MiB  {}",
                device.index()?,
                p.pid,
                p.used_gpu_memory.map_or("N/A".to_string(), |b| mib(b).to_string()),
                show(system::get_process_name(p.pid))
            );
        }
    }
    if !any {
        println!("  no compute process running");
    }
    Ok(())
}

/// The topology and peer-to-peer matrix (`nvidia-smi topo -m`).
fn topology(devices: &[Device]) {
    println!("Topology (common ancestor / P2P read):");
    for a in devices {
        let row: Vec<String> = devices
            .iter()
            .map(|b| {
                if a == b {
                    return "X".to_string();
                }
                let level = show(get_topology_common_ancestor(a, b));
                let p2p = show(get_p2p_status(a, b, GpuP2PCapsIndex::Read));
                format!("{level}/{p2p}")
            })
            .collect();
        println!("  GPU {}: {}", show(a.index()), row.join("  "));
    }
}
