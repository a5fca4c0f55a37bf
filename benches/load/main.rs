//! The A2A load generator: `cargo bench --bench load -- [OPTIONS]` (see
//! `benches/README.md`, or `--help`).
//!
//! It speaks A2A, not just HTTP: its scenarios send messages, read streams to their
//! end, hold conversations, call tools and keep many subscriptions open, and it counts
//! JSON-RPC errors by their A2A reason. Latencies go into HDR histograms; with `--rate`
//! the load is open loop and latency is measured from the intended start of each
//! operation, so queueing in an overloaded server shows instead of slowing the client.
//!
//! Without `--url` it loads the real server started in this process on 127.0.0.1 (the
//! binary's default agent, SQLite in a temporary directory): plain `cargo bench` is a
//! short, self-contained `send` run, and under `cargo test` (no `--bench` flag) a
//! one-second smoke test. The process exits with 1 when no operation succeeded, or when
//! more than `--max-error-rate` failed, and with 2 on bad arguments.
//!
//! Layout: `args` (command line) → `target` (the URL checks, or the in-process server)
//! → `scenarios` (what an operation is) run by `driver` (when operations start) →
//! `stats` → `report`; `client` and `protocol` speak A2A; `memory` samples the
//! server's memory; `progress` draws the bar.

mod args;
mod client;
mod driver;
mod grpc;
mod memory;
mod progress;
mod protocol;
mod report;
mod scenarios;
mod stats;
mod target;

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use tokio::sync::watch;

use crate::args::{Args, Binding, Format, TARGET_NAME};
use crate::client::Client;
use crate::driver::Plan;
use crate::memory::Sampler;
use crate::progress::{Bound, Live, Progress};
use crate::report::{Report, RunInfo};
use crate::scenarios::Scenario;
use crate::target::InProcessServer;

fn main() -> ExitCode {
    let args = Args::parse();
    if args.list {
        if args.selected() {
            println!("{TARGET_NAME}: benchmark");
        }
        return ExitCode::SUCCESS;
    }
    if !args.selected() {
        return ExitCode::SUCCESS;
    }
    args.validate();
    raise_open_files_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("load: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("load: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the load against the chosen target, prints the report and judges it.
async fn run(args: &Args) -> anyhow::Result<ExitCode> {
    // Created first, so a bad path fails before the load, not after it.
    let json_file = args
        .json
        .as_ref()
        .map(|path| {
            std::fs::File::create(path)
                .with_context(|| format!("cannot create the JSON report {}", path.display()))
        })
        .transpose()?;
    let (server, url) = match &args.url {
        Some(url) => {
            target::check_url(url, args.allow_remote).await?;
            (None, url.clone())
        }
        None => {
            let grpc = args.binding == Binding::Grpc;
            let server = tokio::task::spawn_blocking(move || InProcessServer::start(grpc))
                .await
                .context("starting the in-process server")??;
            let url = server.url.clone();
            (Some(server), url)
        }
    };
    let report = load(args, &url, server.is_some()).await;
    if let Some(server) = server
        && let Err(e) = server.stop().await
    {
        // The measurements stand; only the clean-up went wrong.
        eprintln!("load: stopping the in-process server: {e:#}");
    }
    let report = report?;

    match args.format {
        Format::Table => print!("{}", report.to_table()),
        Format::Json => println!("{}", report.to_json()),
    }
    if let (Some(mut file), Some(path)) = (json_file, &args.json) {
        writeln!(file, "{}", report.to_json())
            .with_context(|| format!("cannot write the JSON report {}", path.display()))?;
    }
    if report.succeeded == 0 {
        eprintln!("load: no operation succeeded");
        return Ok(ExitCode::FAILURE);
    }
    if let Some(max) = args.max_error_rate
        && report.error_rate() > max
    {
        eprintln!(
            "load: {:.2} % of operations failed, more than the --max-error-rate of {:.2} %",
            report.error_rate() * 100.0,
            max * 100.0
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the scenario and measures the server's memory meanwhile.
async fn load(args: &Args, url: &reqwest::Url, in_process: bool) -> anyhow::Result<Report> {
    let scenario = args.scenario;
    let connections = usize::try_from(args.connections).context("--connections")?;
    let tasks = usize::try_from(args.tasks).context("--tasks")?;
    // Subscribe always publishes on a schedule: by default one follow-up per task per second.
    let rate = match scenario {
        Scenario::Subscribe => Some(args.rate.unwrap_or(tasks as f64)),
        _ => args.rate,
    };
    let plan = Plan {
        connections,
        rate,
        warmup: args.warmup(),
        duration: args.duration(),
        requests: args.requests,
        timeout: args.timeout,
    };
    let settings = scenarios::Settings {
        text: args.text.as_str().into(),
        turns: args.turns,
        push_receivers: args.push_receivers as usize,
        push_dead: args.push_dead as usize,
        tools: if scenario == Scenario::Tool {
            args.tool_calls().into()
        } else {
            Arc::from([])
        },
        tasks,
        run_id: uuid::Uuid::new_v4().simple().to_string()[..8].to_owned(),
        memory_pid: args
            .server_pid
            .or_else(|| in_process.then(std::process::id)),
    };
    // Subscribers hold their connections; the follow-up messages need their own.
    let pool = match scenario {
        Scenario::Subscribe => connections + tasks,
        _ => connections,
    };
    let mut client = Client::new(
        url.clone(),
        args.dialect,
        args.api_key.as_deref().map(|key| (key, args.auth_header)),
        pool,
        args.message_id_prefix.clone(),
        args.message_ids,
    )?;
    if args.binding == Binding::Grpc {
        client =
            client.with_grpc(grpc::GrpcWire::connect(url, pool, args.api_key.as_deref()).await?);
    }
    let client = Arc::new(client);
    let sampler = match (args.server_pid, in_process) {
        (Some(pid), _) => Some(Sampler::start(pid, "the server")?),
        (None, true) => Some(Sampler::start(
            std::process::id(),
            "this process (in-process server and load generator)",
        )?),
        (None, false) => None,
    };

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!(
                "load: interrupted; finishing the operations under way (Ctrl-C again to quit)"
            );
            // Ignored error: the run is over already.
            let _ = stop_tx.send(true);
        }
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(130);
        }
    });
    eprintln!("load: {}", describe(args, &plan, url, in_process));
    let live = Arc::new(Live::default());
    let bound = match (plan.duration, plan.requests) {
        (Some(duration), _) => Bound::Time(plan.warmup + duration),
        (None, Some(n)) => Bound::Count(n),
        (None, None) => unreachable!("a run is bounded by a duration or a request count"),
    };
    let progress = Progress::start(live.clone(), bound, scenario.unit(), args.quiet);
    let measured = scenarios::run(scenario, &settings, client, &plan, live, stop_rx.clone()).await;
    progress.finish();
    let memory = match sampler {
        Some(sampler) => Some(sampler.finish().await),
        None => None,
    };
    let measured = measured?;
    let interrupted = *stop_rx.borrow();
    let info = RunInfo {
        scenario: scenario.name(),
        main_latency: scenario.latency(),
        unit: scenario.unit(),
        url: url.to_string(),
        in_process,
        binding: match args.binding {
            Binding::Jsonrpc => "JSON-RPC",
            Binding::Grpc => "gRPC",
        },
        dialect: args.dialect,
        connections: args.connections,
        rate: plan.rate,
        warmup: plan.warmup,
        duration: plan.duration,
        requests: plan.requests,
        timeout: plan.timeout,
        interrupted,
    };
    Ok(Report::new(info, &measured.stats, measured.window, memory))
}

/// One line saying what is about to happen.
fn describe(args: &Args, plan: &Plan, url: &reqwest::Url, in_process: bool) -> String {
    let bound = match (plan.duration, plan.requests) {
        (Some(d), Some(n)) => format!("{} or {n} operations", humantime::format_duration(d)),
        (Some(d), None) => humantime::format_duration(d).to_string(),
        (None, Some(n)) => format!("{n} operations"),
        (None, None) => String::new(),
    };
    let shape = match plan.rate {
        Some(rate) => format!("open loop at {rate} /s"),
        None => "closed loop".to_owned(),
    };
    format!(
        "{}{} against {url}{} for {bound} after a {} warm-up, {} connections, {shape}",
        args.scenario.name(),
        if args.binding == Binding::Grpc {
            " over gRPC (the card's GRPC interface)"
        } else {
            ""
        },
        if in_process {
            " (in-process server)"
        } else {
            ""
        },
        humantime::format_duration(plan.warmup),
        plan.connections,
    )
}

/// Many subscribers need many sockets, on both ends when the server is in-process:
/// raise the soft limit on open files to the hard one.
fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: both calls only read or write the `rlimit` passed by reference.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            // A refusal leaves the limit as it was; running out shows as connect errors.
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
