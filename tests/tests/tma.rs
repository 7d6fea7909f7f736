//! TMA tensor maps on the GPU: tiles of 2D tensors loaded into shared memory by
//! `cp.async.bulk.tensor` (with an mbarrier) and checked element by element, strided views,
//! `replace_address`, graphs holding the described memory, and the checks made before the
//! driver.

use cuda_core::graph::CaptureMode;
use cuda_core::{
    launch, Buffer, CodeType, DType, Device, Kernel, LaunchConfig, Program, ProgramOptions, SourceType, Stream,
    StridedMemoryView, TensorMapDataType, TensorMapDescriptor, TensorMapDescriptorOptions, TensorMapIm2colOptions,
    TensorMapIm2colWideOptions, TensorMapSwizzle,
};

const TILE_ROWS: usize = 16;
const TILE_COLS: usize = 32;

/// Each block loads the tile at (blockIdx.y, blockIdx.x) of a 2D float tensor with one bulk
/// tensor copy completing on an mbarrier, then writes the tile, row-major, to its slot of `out`.
const CODE: &str = r#"
struct __align__(64) TensorMap { unsigned long long opaque[16]; };

constexpr int TILE_ROWS = 16;
constexpr int TILE_COLS = 32;
constexpr int TILE = TILE_ROWS * TILE_COLS;

extern "C" __global__ void tma_tiles(const __grid_constant__ TensorMap map, float* out) {
    __shared__ __align__(128) float tile[TILE];
    __shared__ __align__(8) unsigned long long bar;
    const unsigned bar_addr = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
    const unsigned smem_addr = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar_addr) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const int x = blockIdx.x * TILE_COLS;  // innermost coordinate: the column
        const int y = blockIdx.y * TILE_ROWS;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     :: "r"(bar_addr), "r"(static_cast<unsigned>(TILE * sizeof(float))) : "memory");
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
            :: "r"(smem_addr), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y), "r"(bar_addr)
            : "memory");
    }
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\tselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar_addr) : "memory");
    }
    const int slot = blockIdx.y * gridDim.x + blockIdx.x;
    for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
        out[slot * TILE + i] = tile[i];
    }
}
"#;

fn setup() -> (Device, Stream) {
    let d = Device::new(0).expect("a GPU");
    d.set_current().unwrap();
    let s = d.create_stream(Default::default()).unwrap();
    (d, s)
}

fn kernel(d: &Device) -> Kernel {
    let cc = d.compute_capability().unwrap();
    assert!(cc.major >= 9, "TMA needs compute capability 9.0; this GPU is {cc}");
    let options = ProgramOptions {
        arch: Some(format!("sm_{}", d.arch().unwrap())),
        std: Some("c++17".into()),
        ..Default::default()
    };
    Program::new(CODE, SourceType::Cxx, options)
        .unwrap()
        .compile(CodeType::Cubin, &[])
        .unwrap()
        .get_kernel("tma_tiles")
        .unwrap()
}

/// `rows` x `cols` floats, `pitch` floats apart, element (r, c) = `base` + r * 1000 + c.
fn tensor(d: &Device, s: &Stream, rows: usize, pitch: usize, cols: usize, base: f32) -> Buffer {
    let data: Vec<f32> = (0..rows * pitch)
        .map(|i| {
            if i % pitch < cols {
                base + (i / pitch * 1000 + i % pitch) as f32
            } else {
                -1.0
            }
        })
        .collect();
    d.allocate_from_slice(&data, s).unwrap()
}

/// The grid of tiles covering `rows` x `cols`.
fn tiles(rows: usize, cols: usize) -> (u32, u32) {
    (cols.div_ceil(TILE_COLS) as u32, rows.div_ceil(TILE_ROWS) as u32)
}

/// Runs the kernel over every tile and checks each loaded element against the tensor's value
/// (zero outside it: the hardware fills out-of-bounds elements).
fn load_and_check(
    map: &TensorMapDescriptor<'_>,
    k: &Kernel,
    d: &Device,
    s: &Stream,
    rows: usize,
    cols: usize,
    base: f32,
) {
    let (gx, gy) = tiles(rows, cols);
    let out = d
        .allocate(gx as usize * gy as usize * TILE_ROWS * TILE_COLS * 4, s)
        .unwrap();
    out.fill_u8(0xff, s).unwrap();
    // SAFETY: the kernel reads through the map and writes one tile per block into `out`, which
    // holds every tile.
    unsafe { launch(s, &LaunchConfig::new((gx, gy), 128), k, (map, &out)) }.unwrap();
    check_tiles(&out.to_vec::<f32>(s).unwrap(), rows, cols, base);
}

fn check_tiles(got: &[f32], rows: usize, cols: usize, base: f32) {
    let (gx, _) = tiles(rows, cols);
    for (i, v) in got.iter().enumerate() {
        let (slot, at) = (i / (TILE_ROWS * TILE_COLS), i % (TILE_ROWS * TILE_COLS));
        let r = slot / gx as usize * TILE_ROWS + at / TILE_COLS;
        let c = slot % gx as usize * TILE_COLS + at % TILE_COLS;
        let want = if r < rows && c < cols {
            base + (r * 1000 + c) as f32
        } else {
            0.0
        };
        assert_eq!(*v, want, "element ({r}, {c}) of tile slot {slot}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn tma_loads_tiles_of_a_2d_tensor_into_shared_memory() {
    let (d, s) = setup();
    let k = kernel(&d);
    // 70 x 100: partial tiles at the right and bottom edges read zeros beyond the tensor.
    let (rows, cols) = (70, 100);
    let src = tensor(&d, &s, rows, cols, cols, 0.0);
    let options = TensorMapDescriptorOptions::new([TILE_ROWS as u32, TILE_COLS as u32]);
    let map = src.as_tensor_map(&[rows, cols], None, DType::F32, &options).unwrap();
    assert_eq!(
        format!("{map:?}"),
        "TensorMapDescriptor(tiled, rank=2, dtype=FLOAT32, swizzle=NONE)"
    );
    assert_eq!(
        (map.rank(), map.shape(), map.address()),
        (2, &[rows, cols][..], src.handle())
    );
    assert_eq!((map.device(), map.data_type()), (d, TensorMapDataType::Float32));
    assert!(std::ptr::eq(map.buffer().unwrap(), &src));
    load_and_check(&map, &k, &d, &s, rows, cols, 0.0);
    // On the default stream too (legacy or per-thread, as the environment says).
    load_and_check(&map, &k, &d, &d.default_stream(), rows, cols, 0.0);
    // The same through a read-only view (it still lends its buffer to the map), moved as
    // FLOAT32_FTZ (an override of the same size).
    let view = StridedMemoryView::from_buffer(&src, &[rows, cols], None, DType::F32, true).unwrap();
    let mut o = options.clone();
    o.data_type = Some(TensorMapDataType::Float32Ftz);
    let map = view.as_tensor_map(&o).unwrap();
    assert_eq!(map.data_type(), TensorMapDataType::Float32Ftz);
    load_and_check(&map, &k, &d, &s, rows, cols, 0.0);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn tma_maps_strided_views_and_replaced_addresses() {
    let (d, s) = setup();
    let k = kernel(&d);
    // Columns 0..100 of a 70 x 128 array: rows 512 bytes apart.
    let (rows, cols, pitch) = (70, 100, 128);
    let a = tensor(&d, &s, rows, pitch, cols, 0.0);
    let b = tensor(&d, &s, rows, pitch, cols, 0.5);
    let va = StridedMemoryView::from_buffer(&a, &[rows, cols], Some(&[pitch as isize, 1]), DType::F32, false).unwrap();
    let vb = StridedMemoryView::from_buffer(&b, &[rows, cols], Some(&[pitch as isize, 1]), DType::F32, false).unwrap();
    let mut map = va
        .as_tensor_map(&TensorMapDescriptorOptions::new([TILE_ROWS as u32, TILE_COLS as u32]))
        .unwrap();
    load_and_check(&map, &k, &d, &s, rows, cols, 0.0);
    // Repointed (cuda.core's tma_replace_address.py): the next launch reads `b`.
    map.replace_address(&vb).unwrap();
    assert_eq!(map.address(), b.handle());
    load_and_check(&map, &k, &d, &s, rows, cols, 0.5);
    // Another layout is refused (the map's extents are baked in), and the map is unchanged.
    let dense = StridedMemoryView::from_buffer(&a, &[rows, cols], None, DType::F32, false).unwrap();
    let e = map.replace_address(&dense).unwrap_err().to_string();
    assert!(e.contains("layout the descriptor was made for"), "{e}");
    let wider = StridedMemoryView::from_buffer(&a, &[rows, pitch], None, DType::F32, false).unwrap();
    assert!(map.replace_address(&wider).is_err());
    assert_eq!(map.address(), b.handle());
    load_and_check(&map, &k, &d, &s, rows, cols, 0.5);
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn graphs_hold_the_memory_a_tensor_map_describes() {
    let (d, s) = setup();
    let k = kernel(&d);
    let (rows, cols) = (32, 64);
    let (gx, gy) = tiles(rows, cols);
    let out = d
        .allocate(gx as usize * gy as usize * TILE_ROWS * TILE_COLS * 4, &s)
        .unwrap();
    let graph = {
        let src = tensor(&d, &s, rows, cols, cols, 3.0);
        let options = TensorMapDescriptorOptions::new([TILE_ROWS as u32, TILE_COLS as u32]);
        let map = src.as_tensor_map(&[rows, cols], None, DType::F32, &options).unwrap();
        s.sync().unwrap();
        s.capture_graph(CaptureMode::ThreadLocal, |c| {
            // SAFETY: as in `load_and_check`.
            unsafe { launch(c, &LaunchConfig::new((gx, gy), 128), &k, (&map, &out)) }
        })
        .unwrap()
        // The map and its buffer are dropped here: the graph holds the memory.
    };
    // Churn the pool: memory freed too early would be handed out again and overwritten.
    for _ in 0..8 {
        let junk = tensor(&d, &s, rows, cols, cols, -7.0);
        drop(junk);
    }
    for _ in 0..2 {
        out.fill_u8(0, &s).unwrap();
        graph.launch(&s).unwrap();
        check_tiles(&out.to_vec::<f32>(&s).unwrap(), rows, cols, 3.0);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: cargo xtask test-gpu"]
fn tensor_maps_are_checked_before_the_driver() {
    let (d, s) = setup();
    let buffer = d.allocate(64 * 64 * 4, &s).unwrap();
    let view = StridedMemoryView::from_buffer(&buffer, &[64, 64], None, DType::F32, false).unwrap();
    let err = |o: &TensorMapDescriptorOptions| view.as_tensor_map(o).unwrap_err().to_string();
    assert_eq!(
        err(&TensorMapDescriptorOptions::new([16])),
        "box_dim must have 2 elements (same as tensor rank), got 1"
    );
    assert_eq!(
        err(&TensorMapDescriptorOptions::new([16, 512])),
        "box_dim[1] must be in [1, 256], got 512"
    );
    let mut o = TensorMapDescriptorOptions::new([16, 32]);
    o.element_strides = Some(vec![1, 9]);
    assert_eq!(err(&o), "element_strides[1] must be in [1, 8], got 9");
    o.element_strides = None;
    o.data_type = Some(TensorMapDataType::Uint16);
    assert!(err(&o).contains("2-byte elements"));
    o.data_type = None;
    o.swizzle = TensorMapSwizzle::Swizzle64B; // a 128-byte inner box does not fit a 64-byte span
    assert!(err(&o).contains("at most 64 bytes"));
    o.swizzle = TensorMapSwizzle::Swizzle128B;
    assert_eq!(
        format!("{:?}", view.as_tensor_map(&o).unwrap()),
        "TensorMapDescriptor(tiled, rank=2, dtype=FLOAT32, swizzle=SWIZZLE_128B)"
    );
    // Unaligned memory, host memory, unsupported dtypes.
    // SAFETY: the view is only checked, never used for GPU work; its bytes lie in `buffer`.
    let unaligned = unsafe {
        StridedMemoryView::from_raw(
            buffer.handle() + 4,
            &[16],
            None,
            DType::F32,
            Some(d.device_id()),
            true,
            false,
        )
    }
    .unwrap();
    let e = unaligned
        .as_tensor_map(&TensorMapDescriptorOptions::new([16]))
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("Global memory address must be 16-byte aligned"),
        "{e}"
    );
    let host = vec![0f32; 64];
    let hv = StridedMemoryView::from_host_slice(&host, &[64], None).unwrap();
    let e = hv.as_tensor_map(&TensorMapDescriptorOptions::new([16])).unwrap_err();
    assert!(e.to_string().contains("device-accessible"), "{e}");
    let bytes = StridedMemoryView::from_buffer(&buffer, &[64], None, DType::I8, false).unwrap();
    let e = bytes.as_tensor_map(&TensorMapDescriptorOptions::new([16])).unwrap_err();
    assert!(e.to_string().starts_with("Unsupported dtype int8 for TMA"), "{e}");
    // An int8 view is moved as UINT8 when asked to (same element size).
    let mut o = TensorMapDescriptorOptions::new([16]);
    o.data_type = Some(TensorMapDataType::Uint8);
    let wide = bytes.as_tensor_map(&o).unwrap();
    assert_eq!(wide.data_type(), TensorMapDataType::Uint8);

    // im2col: rank 3 to 5, corners per spatial dimension.
    let nwc = StridedMemoryView::from_buffer(&buffer, &[2, 64, 32], None, DType::F32, false).unwrap();
    let im2col = TensorMapIm2colOptions {
        pixel_box_lower_corner: vec![-1],
        pixel_box_upper_corner: vec![-1],
        channels_per_pixel: 32,
        pixels_per_column: 16,
        ..Default::default()
    };
    let map = TensorMapDescriptor::im2col(&nwc, &im2col).unwrap();
    assert_eq!(
        format!("{map:?}"),
        "TensorMapDescriptor(im2col, rank=3, dtype=FLOAT32, swizzle=NONE)"
    );
    let e = TensorMapDescriptor::im2col(&view, &im2col).unwrap_err();
    assert_eq!(e.to_string(), "Im2col tensor rank must be between 3 and 5, got 2");
    let mut bad = im2col.clone();
    bad.pixel_box_lower_corner = vec![0, 0];
    assert!(TensorMapDescriptor::im2col(&nwc, &bad).is_err());
    // im2col-wide: Blackwell and newer.
    let wide = TensorMapIm2colWideOptions {
        channels_per_pixel: 32,
        pixels_per_column: 16,
        ..Default::default()
    };
    match TensorMapDescriptor::im2col_wide(&nwc, &wide) {
        Ok(map) => assert!(d.compute_capability().unwrap().major >= 10, "{map:?}"),
        Err(e) => {
            assert!(d.compute_capability().unwrap().major < 10);
            assert!(e.to_string().contains("compute capability 10.0"), "{e}");
        }
    }
}
