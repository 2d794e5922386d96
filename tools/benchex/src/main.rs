//! `benchex`: BenchEx's command line as a binary of its own (also `resex benchex`); see
//! `benchex --help`.

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    benchex::cli::main_with(
        std::env::args_os(),
        Some(&resex_embedded::benchex_local::run),
    )
}
