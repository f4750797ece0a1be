//! `accord-hub`: the Accord hub binary. Everything lives in the library; see [`accord_hub::cli`].

#![forbid(unsafe_code)]

/// jemalloc instead of the system allocator: a hub holds one long-lived stream per member
/// cluster, and after a connect storm (thousands of TLS handshakes, registrations and
/// status writes at once) the system allocator kept the freed memory resident.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    accord_hub::cli::main()
}
