//! `echo-bench`'s binary: the program is the library's [`echo_bench::real_main`].

fn main() {
    std::process::exit(echo_bench::real_main());
}
