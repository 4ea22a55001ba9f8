//! The `patchwright` command line: parses flags (their types are in
//! `cli`), dispatches to the subcommand's body (in `cli`'s submodules), and
//! prints its error. Results go to stdout, logs to stderr.

mod cli;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command, EnvCommand, ModelsCommand, SandboxCommand, SlurmCommand};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let result = match cli.command {
        Command::Batch(args) => cli::batch::batch(args),
        Command::Sweep(args) => cli::batch::sweep(args),
        Command::Merge(args) => cli::batch::merge(args),
        Command::Slurm(SlurmCommand::Batch(args)) => cli::slurm::batch(args),
        Command::Slurm(SlurmCommand::Sweep(args)) => cli::slurm::sweep(args),
        Command::Slurm(SlurmCommand::Status(args)) => cli::slurm::status(args),
        Command::Report(args) => cli::batch::report(args),
        Command::Models(ModelsCommand::List { json }) => cli::models::list(json),
        Command::Models(ModelsCommand::Fetch { name }) => cli::models::fetch(&name),
        Command::Models(ModelsCommand::Synth(args)) => cli::models::synth(args),
        Command::Models(ModelsCommand::Bench(args)) => cli::models::bench(args),
        Command::Models(ModelsCommand::Tokenizer { model, out }) => {
            cli::models::tokenizer(&model, &out)
        }
        Command::Generate(args) => cli::models::generate(args),
        Command::Sandbox(SandboxCommand::Exec(args)) => cli::tools::sandbox_exec(args),
        Command::Sandbox(SandboxCommand::FetchWasi(args)) => cli::tools::fetch_wasi(args),
        Command::Aci(args) => cli::tools::aci(args),
        Command::Run(args) => cli::batch::run(args),
        Command::Env(EnvCommand::Build(args)) => cli::evaluation::env_build(args),
        Command::Eval(args) => cli::evaluation::eval(args),
        Command::Check(args) => cli::evaluation::check(args),
        Command::Pack(args) => cli::pack::pack(args),
    };
    match result {
        Ok(0) => ExitCode::SUCCESS,
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            if e.downcast_ref::<patchwright::inputs::SandboxUnavailable>()
                .is_some()
            {
                ExitCode::from(cli::EXIT_NO_SANDBOX)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The error and its causes, each cause left out when the message before it
/// already quotes it (library errors name their cause in their message).
fn chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

fn init_logging(verbose: u8) {
    let llama = patchwright::engine::llama_log_directives;
    let default = match verbose {
        0 => format!("patchwright=info,{}", llama("error")),
        1 => format!("patchwright=debug,{}", llama("warn")),
        _ => "trace".to_string(),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("PATCHWRIGHT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(patchwright::batch::progress::LogWriter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}
