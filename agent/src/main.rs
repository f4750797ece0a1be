//! `accord-agent`: the Accord agent binary. Everything lives in the library; see [`accord_agent::cli`].

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    accord_agent::cli::main()
}
