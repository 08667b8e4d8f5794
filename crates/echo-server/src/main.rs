//! `echo-server`'s binary: the program is the library's [`echo_server::main`].

fn main() -> std::process::ExitCode {
    echo_server::main()
}
