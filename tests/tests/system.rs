//! `cuda_core::system` on a machine with a driver.

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn driver_versions_and_device_count() {
    use cuda_core::system;
    let (major, minor) = system::get_user_mode_driver_version().unwrap();
    let kernel = system::get_kernel_mode_driver_version().unwrap();
    let branch = system::get_driver_branch().unwrap();
    let nvml = system::get_nvml_version().unwrap();
    let devices = system::get_num_devices().unwrap();
    println!("CUDA {major}.{minor}, kernel driver {kernel} ({branch}), NVML {nvml}, {devices} device(s)");
    assert!(major >= 12);
    let kernel_major: u32 = kernel.split('.').next().unwrap().parse().unwrap();
    assert!(kernel_major >= 525, "{kernel}");
    assert!(branch.contains(&kernel_major.to_string()), "{branch} vs {kernel}");
    assert!(nvml.contains(&kernel), "{nvml} vs {kernel}");
    assert!(devices >= 1);
}
