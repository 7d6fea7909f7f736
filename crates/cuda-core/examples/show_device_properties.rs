//! Every device and its properties (cuda.core's `show_device_properties.py`).
mod common;
use common::main_with;
use cuda_core::{system, Device};

fn main() {
    main_with(|| {
        let (major, minor) = system::get_user_mode_driver_version()?;
        println!("CUDA driver {major}.{minor}");
        for device in Device::all()? {
            println!(
                "\ndevice {}: {}\n  uuid {}\n  pci {}\n  compute capability {}\n  memory {:.1} GiB",
                device.device_id(),
                device.name()?,
                device.uuid()?,
                device.pci_bus_id()?,
                device.compute_capability()?,
                device.total_memory()? as f64 / (1u64 << 30) as f64
            );
            for (name, value) in device.properties().all() {
                println!("  {name:<55} {value}");
            }
        }
        Ok(())
    })
}
