//! Tracing (feature `tracing`): a compile opens a span, and finding NVRTC emits
//! cuda-pathfinder's event, seen by a subscriber of the test's own (no GPU needed).
#![cfg(feature = "tracing")]

use cuda_core::{CodeType, Program, ProgramOptions, SourceType};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Writes down every span opened and every event, with its message.
struct Recorder {
    seen: Arc<Mutex<Vec<String>>>,
    next: AtomicU64,
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        self.seen
            .lock()
            .unwrap()
            .push(format!("span {}", span.metadata().name()));
        Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        self.seen
            .lock()
            .unwrap()
            .push(format!("event {} {}", event.metadata().level(), message.0));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn a_compile_opens_a_span_and_the_library_search_is_reported() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorder = Recorder {
        seen: seen.clone(),
        next: AtomicU64::new(0),
    };
    let compiled = tracing::subscriber::with_default(recorder, || {
        let source = r#"extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }"#;
        let options = ProgramOptions {
            arch: Some("sm_90".into()),
            ..Default::default()
        };
        Program::new(source, SourceType::Cxx, options).and_then(|mut p| p.compile(CodeType::Ptx, &[]))
    });
    let seen = seen.lock().unwrap().clone();
    assert!(seen.iter().any(|s| s == "span compile"), "{seen:?}");
    match compiled {
        Ok(_) => assert!(
            seen.iter().any(|s| s.contains("cuda-pathfinder found a library")),
            "{seen:?}"
        ),
        Err(e) if std::env::var_os("CUDA_RS_REQUIRE_WHEELS").is_some() => panic!("NVRTC must load: {e}"),
        // Without NVRTC the search is reported as failed.
        Err(_) => assert!(
            seen.iter().any(|s| s.contains("cuda-pathfinder found no library")),
            "{seen:?}"
        ),
    }
}
