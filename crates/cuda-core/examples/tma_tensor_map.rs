//! TMA tensor maps (cuda.core's `tma_tensor_map.py` and `tma_replace_address.py`): a tiled
//! descriptor of a 1D tensor passed by value (`__grid_constant__`) to a kernel whose blocks each
//! load one tile into shared memory with `cp.async.bulk.tensor` completing on an mbarrier; then
//! the same descriptor repointed at another tensor with `replace_address`. Hopper or newer.
mod common;
use common::{main_with, zeroed};
use cuda_core::{
    launch, CodeType, DType, Device, LaunchConfig, Program, ProgramOptions, SourceType, StridedMemoryView,
    TensorMapDescriptorOptions,
};

const TILE_SIZE: usize = 128;

/// The 128-byte `CUtensorMap` is declared inline so NVRTC needs no driver header; the PTX is
/// what libcudacxx's `cp_async_bulk_tensor_1d_global_to_shared` and `barrier_arrive_tx` emit.
const CODE: &str = r#"
struct __align__(64) TensorMap { unsigned long long opaque[16]; };

static constexpr int TILE_SIZE = 128;

extern "C" __global__ void tma_copy(const __grid_constant__ TensorMap tensor_map, float* output, int n) {
    __shared__ __align__(128) float smem[TILE_SIZE];
    __shared__ __align__(8) unsigned long long bar;
    const unsigned bar_addr = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
    const int tid = threadIdx.x;
    const int tile_start = blockIdx.x * TILE_SIZE;
    if (tid == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar_addr) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (tid == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     :: "r"(bar_addr), "r"(static_cast<unsigned>(TILE_SIZE * sizeof(float))) : "memory");
        asm volatile(
            "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2}], [%3];"
            :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(smem))),
               "l"(reinterpret_cast<unsigned long long>(&tensor_map)), "r"(tile_start), "r"(bar_addr)
            : "memory");
    }
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\tselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar_addr) : "memory");
    }
    const int idx = tile_start + tid;
    if (tid < TILE_SIZE && idx < n) output[idx] = smem[tid];
}
"#;

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        let cc = device.compute_capability()?;
        if cc.major < 9 {
            println!("TMA requires compute capability >= 9.0 (Hopper or later); this GPU is {cc}: skipped");
            return Ok(());
        }
        device.set_current()?;
        let stream = device.create_stream(Default::default())?;
        let options = ProgramOptions {
            arch: Some(format!("sm_{}", device.arch()?)),
            std: Some("c++17".into()),
            ..Default::default()
        };
        let kernel = Program::new(CODE, SourceType::Cxx, options)?
            .compile(CodeType::Cubin, &[])?
            .get_kernel("tma_copy")?;

        // 1) A descriptor of the source tensor, and one TMA load per tile.
        let n = 1024usize;
        let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let src = device.allocate_from_slice(&data, &stream)?;
        let view = StridedMemoryView::from_buffer(&src, &[n], None, DType::F32, true)?;
        let mut tensor_map = view.as_tensor_map(&TensorMapDescriptorOptions::new([TILE_SIZE as u32]))?;
        println!("{tensor_map:?}");
        let n_tiles = n / TILE_SIZE;
        let config = LaunchConfig::new(n_tiles as u32, TILE_SIZE as u32);
        let output = zeroed::<f32>(&device, &stream, n)?;
        // SAFETY: each block loads one tile through the map and writes its n-bounded slice of
        // `output`, which holds n floats.
        unsafe { launch(&stream, &config, &kernel, (&tensor_map, &output, n as i32))? };
        assert_eq!(
            output.to_vec::<f32>(&stream)?,
            data,
            "TMA copy produced incorrect results"
        );
        println!("TMA copy verified: {n} elements across {n_tiles} tiles");

        // 2) The same descriptor, repointed (no re-encoding).
        let replacement = device.allocate_from_slice(&vec![42.0f32; n], &stream)?;
        let replacement_view = StridedMemoryView::from_buffer(&replacement, &[n], None, DType::F32, true)?;
        tensor_map.replace_address(&replacement_view)?;
        let output2 = zeroed::<f32>(&device, &stream, n)?;
        // SAFETY: as above.
        unsafe { launch(&stream, &config, &kernel, (&tensor_map, &output2, n as i32))? };
        assert!(
            output2.to_vec::<f32>(&stream)?.iter().all(|v| *v == 42.0),
            "replace_address produced incorrect results"
        );
        println!("replace_address verified: descriptor reused with new source tensor");
        Ok(())
    })
}
