//! `accord-sandbox up | status | down`: a local Accord federation (see
//! `accord_e2e::sandbox`).

fn main() -> std::process::ExitCode {
    accord_e2e::sandbox::cli::main()
}
