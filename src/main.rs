//! The `logbook` binary: everything lives in `cli/` over the library.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
