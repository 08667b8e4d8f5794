//! `echolab-up`: see `echolab-up --help` and the library's documentation.

use std::process::ExitCode;

use echolab_runtime::{custom_server, hold};
use echolab_up::{app, cli, explain, replay};

fn code(c: i32) -> ExitCode {
    ExitCode::from(u8::try_from(c).unwrap_or(1))
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    // The in-image jobs come first: they must not need a runtime or a checkout.
    match argv.get(1).map(String::as_str) {
        Some("__hold") => return code(hold::hold()),
        Some("__signal") => return code(hold::signal(&argv[2..])),
        Some("__cpu-model") => return code(hold::cpu_model()),
        Some("__serve") => return code(custom_server::serve(&argv[2..])),
        _ => {}
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
