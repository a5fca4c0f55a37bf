//! The command line: `agent-a2a [serve] [--config PATH] [--bind HOST:PORT]
//! [--grpc-bind HOST:PORT] [--database-url URL] [--data-dir DIR]`, `agent-a2a migrate`,
//! `agent-a2a verify-card --card PATH --jwks PATH`, `--help`, `--version`.
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
    /// Check an agent card's signatures (A2A §8.4) against a JWK Set: exit 0 when one
    /// is valid, 1 with the reason otherwise. Reads no configuration.
    VerifyCard(VerifyCardArgs),
}

#[derive(Debug, Clone, Args)]
pub struct VerifyCardArgs {
    /// The agent card, as JSON ("-": standard input).
    #[arg(long, value_name = "PATH")]
    pub card: PathBuf,
    /// The keys trusted, as a JWK Set (e.g. a saved `/.well-known/jwks.json`).
    #[arg(long, value_name = "PATH")]
    pub jwks: PathBuf,
    /// The signature algorithms accepted.
    #[arg(
        long,
        value_name = "ALG,…",
        value_delimiter = ',',
        default_value = "ES256,ES384,RS256,RS384,RS512,PS256,PS384,PS512,EdDSA"
    )]
    pub algorithms: Vec<String>,
}

impl VerifyCardArgs {
    /// Reads both files and verifies; the reason as text when the card is not accepted.
    pub fn run(&self) -> Result<(), String> {
        use jsonwebtoken::{Algorithm, AlgorithmFamily};
        let read = |path: &PathBuf| -> Result<Vec<u8>, String> {
            if path.as_os_str() == "-" {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
                    .map_err(|e| format!("cannot read standard input: {e}"))?;
                Ok(bytes)
            } else {
                std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
            }
        };
        let card = read(&self.card)?;
        let keys: jsonwebtoken::jwk::JwkSet = serde_json::from_slice(&read(&self.jwks)?)
            .map_err(|e| format!("{}: not a JWK Set: {e}", self.jwks.display()))?;
        let algorithms = self
            .algorithms
            .iter()
            .map(|name| {
                name.trim()
                    .parse::<Algorithm>()
                    .ok()
                    .filter(|a| a.family() != AlgorithmFamily::Hmac)
                    .ok_or_else(|| format!("--algorithms: {name:?} is not a public-key algorithm"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        crate::a2a::signing::verify_json(&card, &keys, &algorithms)
            .map(|_| ())
            .map_err(|e| format!("{}: {e}", self.card.display()))
    }
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
    if let Some(Command::VerifyCard(args)) = &cli.command {
        return match args.run() {
            Ok(()) => {
                println!("the card's signature is valid");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("agent-a2a: {e}");
                ExitCode::FAILURE
            }
        };
    }
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
        // Answered above, before any configuration is read.
        Command::VerifyCard(_) => Ok(()),
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
