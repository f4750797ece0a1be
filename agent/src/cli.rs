//! Command-line interface of `accord-agent`.
//!
//! `run` and `join` (DESIGN sections 5 and 7) arrive with the agent and install work; until
//! then the binary only reports its version and the protocol it speaks.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// The Accord agent: joins a member cluster to an Accord hub.
#[derive(Debug, Parser)]
#[command(name = "accord-agent", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands of `accord-agent`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the agent version and the hub protocol package it speaks.
    Version,
}

/// Parses arguments and runs the command; the binary's whole `main`.
pub fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Version => {
            println!(
                "accord-agent {} (protocol accord.v1)",
                env!("CARGO_PKG_VERSION")
            );
            ExitCode::SUCCESS
        }
    }
}
