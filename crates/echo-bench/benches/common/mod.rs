//! What echo-bench's benchmarks share: their environment settings, medians, and the guard
//! that keeps `cargo test --benches` from running minutes of load.

/// `name` from the environment as a number, or `default`.
pub(crate) fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `v` (the mean of the middle two for an even count); `v` must not be empty.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Whether `cargo bench` started this benchmark: it passes `--bench`, while `cargo test
/// --benches` passes nothing and must not run minutes of load.
pub(crate) fn invoked_by_cargo_bench() -> bool {
    std::env::args().any(|a| a == "--bench")
}
