//! The command line: `agent-a2a [serve] [--config PATH] [--bind HOST:PORT]
//! [--grpc-bind HOST:PORT] [--database-url URL] [--data-dir DIR]`, `agent-a2a migrate`,
//! `--help`, `--version`.
//!
//! [`run`] is shared by the binary and the examples, so every program built on the
//! library takes the same flags and configuration.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::{Overrides, Settings};
/// What a program serves (kept here too: the examples build it beside `run`).
pub use crate::startup::{Agent, SkillSource};
use crate::store::StoreConfig;

#[derive(Debug, Parser)]
#[command(
    name = "agent-a2a",
    version,
    about = "A durable A2A (Agent2Agent) server"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the A2A protocol (the default).
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
}

#[derive(Debug, Clone, Args, Default)]
pub struct CommonArgs {
    /// Configuration file (default: ./config.toml when present).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Address to listen on, HOST:PORT.
    #[arg(long, global = true, value_name = "HOST:PORT")]
    pub bind: Option<String>,
    /// Address of the gRPC binding, HOST:PORT; "" turns gRPC off.
    #[arg(long, global = true, value_name = "HOST:PORT")]
    pub grpc_bind: Option<String>,
    /// Database URL (postgres://… or sqlite:PATH); beats DATABASE_URL.
    #[arg(long, global = true, value_name = "URL")]
    pub database_url: Option<String>,
    /// Directory of the embedded SQLite database.
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl CommonArgs {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            config_file: self.config.clone(),
            bind: self.bind.clone(),
            grpc_bind: self.grpc_bind.clone(),
            database_url: self.database_url.clone(),
            data_dir: self.data_dir.clone(),
        }
    }
}

/// Parses the command line and runs the chosen command. Errors are printed to stderr.
pub fn run(agent: Agent) -> ExitCode {
    let cli = Cli::parse();
    let loaded =
        Settings::load(&cli.common.overrides()).and_then(|s| crate::startup::check(&s).map(|()| s));
    let settings = match loaded {
        Ok(s) => s,
        Err(e) => {
            eprintln!("agent-a2a: {e}");
            return ExitCode::from(2);
        }
    };
    let node_id = settings
        .cluster
        .enabled
        .then_some(settings.cluster.node_id.as_str());
    crate::telemetry::init(&settings.log, &settings.telemetry, node_id);
    let result = match cli.command.unwrap_or(Command::Serve) {
        Command::Migrate => crate::store::migrate(&StoreConfig::from_settings(&settings))
            .map(|applied| {
                if applied.is_empty() {
                    println!("database is up to date");
                }
                for name in applied {
                    println!("applied {name}");
                }
            })
            .map_err(|e| e.to_string()),
        Command::Serve => actix_web::rt::System::new()
            .block_on(crate::startup::serve(settings, agent))
            .map_err(|e| e.to_string()),
    };
    crate::telemetry::trace::shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("agent-a2a: {e}");
            ExitCode::FAILURE
        }
    }
}
