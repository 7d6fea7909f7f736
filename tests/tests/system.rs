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
    // The branch names the release it was cut from, such as "r582_49" for driver 580.159.04.
    let branch_major: u32 = branch
        .strip_prefix('r')
        .and_then(|b| b.split('_').next())
        .and_then(|b| b.parse().ok())
        .unwrap_or_else(|| panic!("unexpected branch {branch}"));
    assert!(branch_major / 10 == kernel_major / 10, "{branch} vs {kernel}");
    assert!(nvml.contains(&kernel), "{nvml} vs {kernel}");
    assert!(devices >= 1);
}
