//! Command-line interface of `accord-hub`.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// The Accord hub: multi-cluster federation control plane.
#[derive(Debug, Parser)]
#[command(name = "accord-hub", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands of `accord-hub`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the CRD YAML of every Accord kind (or write one file per CRD with --out-dir).
    Crds {
        /// Write `<plural>.accord.io.yaml` files into this directory instead of printing.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
}

/// Parses arguments and runs the command; the binary's whole `main`.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a parsed command.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Crds { out_dir: Some(dir) } => {
            for path in crate::crdgen::write_crds(&dir)? {
                println!("wrote {path}");
            }
        }
        Command::Crds { out_dir: None } => print!("{}", accord_crds::render_all_crds_yaml()?),
    }
    Ok(())
}
