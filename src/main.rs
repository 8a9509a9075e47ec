//! The `hubalign` command line; all logic lives in the library.

mod cli;

fn main() -> std::process::ExitCode {
    cli::run()
}
