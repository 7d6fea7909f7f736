//! SAXPY with typed buffers: `y = a * x + y` on 1M floats, written as a new user would, with no
//! byte arithmetic and no `unsafe` other than the kernel launch. The input is written straight
//! into pinned memory (whatever pinned memory the driver offers) from the host, copied to the
//! GPU without blocking, processed in two halves on two streams through element-indexed views
//! (`x` as a read-only `const float*`), and copied back into pinned memory, which the host reads
//! once every stream that used it is done.
mod common;
use common::main_with;
use cuda_core::{
    CodeType, Device, EventOptions, LaunchConfig, PinnedMemoryResource, Program, ProgramOptions, SourceType,
    TypedBuffer,
};

const SOURCE: &str = r#"
extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        y[i] = a * x[i] + y[i];
    }
}
"#;

fn main() {
    main_with(|| {
        let device = Device::new(0)?;
        device.set_current()?;
        let (s1, s2) = (
            device.create_stream(Default::default())?,
            device.create_stream(Default::default())?,
        );
        let options = ProgramOptions {
            arch: Some(format!("sm_{}", device.arch()?)),
            ..Default::default()
        };
        let code = Program::new(SOURCE, SourceType::Cxx, options)?.compile(CodeType::Cubin, &[])?;
        // The kernel's `const float*` is a `*const f32`, its `float*` a `*mut f32`.
        let saxpy = code.get_kernel("saxpy")?.typed::<(f32, *const f32, *mut f32, u32)>()?;

        let n = 1 << 20;
        let a = 2.0f32;
        let pinned = PinnedMemoryResource::portable()?;
        println!("pinned memory: {:?}", pinned.kind());

        // Host data, written in place into pinned memory (the allocation is waited for).
        let mut host_x = TypedBuffer::<f32>::allocate(&pinned, n, &s1)?;
        let mut host_y = TypedBuffer::<f32>::allocate(&pinned, n, &s1)?;
        for (i, (x, y)) in host_x
            .host_slice_mut()?
            .iter_mut()
            .zip(host_y.host_slice_mut()?)
            .enumerate()
        {
            *x = i as f32;
            *y = 1.0;
        }

        // To the GPU, stream-ordered: these calls return at once.
        let x = TypedBuffer::<f32>::allocate(&device, n, &s1)?;
        let y = TypedBuffer::<f32>::allocate(&device, n, &s1)?;
        x.copy_from(&host_x, &s1)?;
        y.copy_from(&host_y, &s1)?;
        // The second stream works on the second half once the copies are done.
        let copied = s1.record_new(EventOptions::default())?;
        s2.wait_event(&copied)?;

        let half = n / 2;
        let count = u32::try_from(half)?;
        let config = LaunchConfig::new(256, 256);
        // SAFETY: saxpy reads `count` floats of the x view and writes `count` floats of the y
        // view, which hold exactly that many each.
        unsafe {
            saxpy.launch(&s1, &config, (a, x.slice(..half)?.read_only(), y.slice(..half)?, count))?;
            saxpy.launch(&s2, &config, (a, x.slice(half..)?.read_only(), y.slice(half..)?, count))?;
        }

        // Back to pinned memory, each half on its stream, without blocking.
        host_y.slice(..half)?.copy_from(y.slice(..half)?, &s1)?;
        host_y.slice(half..)?.copy_from(y.slice(half..)?, &s2)?;

        // Reading waits for both streams.
        let result = host_y.host_slice()?;
        for (i, got) in result.iter().enumerate() {
            let want = a * i as f32 + 1.0;
            if *got != want {
                return Err(format!("y[{i}] = {got}, want {want}").into());
            }
        }
        println!("typed saxpy: {n} elements checked on two streams");
        Ok(())
    })
}
