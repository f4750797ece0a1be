//! `kubectl accord`: the kubectl plugin ([`accord_hub::kubectl_plugin`]).

use clap::Parser as _;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let cli = accord_hub::kubectl_plugin::Cli::parse();
    match accord_hub::kubectl_plugin::run(cli).await {
        Ok(text) => {
            print!("{text}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
