//! `accord-hub`: the Accord hub binary. Everything lives in the library; see [`accord_hub::cli`].

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    accord_hub::cli::main()
}
