//! `echolab-up`: see `echolab-up --help` and the library's documentation.

use std::process::ExitCode;

use echolab_core::cmd::Job;
use echolab_runtime::{custom_server, hold};
use echolab_up::{app, cli, explain, replay};

fn code(c: i32) -> ExitCode {
    ExitCode::from(u8::try_from(c).unwrap_or(1))
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    // The in-image jobs come first: they must not need a runtime or a checkout.
    if let Some(job) = Job::parse(&argv[1.min(argv.len())..]) {
        return match job {
            Ok(Job::Hold) => code(hold::hold()),
            Ok(Job::Signal(s)) => code(hold::signal(&s)),
            Ok(Job::CpuModel) => code(hold::cpu_model()),
            Ok(Job::Serve(c)) => code(custom_server::serve(&c)),
            Err(e) => {
                let line = echolab_core::cli::one_line_error(&e.render().to_string());
                eprintln!("echolab-up: {line}");
                ExitCode::from(echolab_core::cli::EXIT_USAGE)
            }
        };
    }
    let args = match echolab_core::cli::parsed_or_exit("echolab-up", cli::parse(argv.clone())) {
        Ok(a) => a,
        Err(code) => return ExitCode::from(code),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("echolab-up: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let argv = argv[1..].to_vec();
    if args.replay() {
        runtime.block_on(replay::run(args, argv))
    } else if args.explain() {
        runtime.block_on(explain::run(args, argv))
    } else {
        runtime.block_on(app::main(args, argv))
    }
}
