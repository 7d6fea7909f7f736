//! GPU integration suite
