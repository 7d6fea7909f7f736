//! Tracing (feature `tracing`, on by default): `span!` enters an info-level span until the end of
//! the enclosing block, `event!` emits an event; both vanish without the feature. Used for
//! compiles, links, loads, graph instantiations, linker fallbacks and errors recorded in `Drop`;
//! never on the launch path.

/// Enters an info-level span named `$name` (with `tracing`'s field syntax) until the end of the
/// enclosing block.
macro_rules! span {
    ($($args:tt)*) => {
        #[cfg(feature = "tracing")]
        let _span = tracing::info_span!($($args)*).entered();
    };
}

/// Emits an event at `$level` (`warn`, `info`, `debug`, ...) with `tracing`'s syntax.
macro_rules! event {
    ($level:ident, $($args:tt)*) => {
        #[cfg(feature = "tracing")]
        tracing::$level!($($args)*);
    };
}
