//! Every experiment shipped in experiments/ parses, validates and expands to cells.

use std::path::Path;

use echolab_core::experiment::Experiment;

#[test]
fn shipped_experiments_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("experiments/ exists") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "yaml") {
            let e = Experiment::load(&path).unwrap_or_else(|err| panic!("{err}"));
            assert_eq!(
                Some(e.name.as_str()),
                path.file_stem().and_then(|s| s.to_str()),
                "name matches file"
            );
            assert!(!e.cells().is_empty());
            names.push(e.name);
        }
    }
    names.sort();
    assert_eq!(
        names,
        [
            "exp31",
            "exp32",
            "exp33",
            "exp34",
            "own-server",
            "select-vs-epoll",
            "smoke"
        ]
    );
}

#[test]
fn seed_matrices_have_the_documented_shape() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
    let load = |n: &str| Experiment::load(&dir.join(format!("{n}.yaml"))).unwrap();
    // exp31: LT and ET x short and long x 100 connections x 10 rounds x 3 repetitions, and
    // the same four as timed open-loop probes, which no claim selects.
    let e = load("exp31");
    assert_eq!((e.cells().len(), e.repetitions), (8, 3));
    let probes: Vec<_> = e.cells().into_iter().filter(|c| c.rate.is_some()).collect();
    assert_eq!(probes.len(), 4);
    assert!(probes.iter().all(|c| c.time_syscalls));
    for claim in &e.reference.claims {
        assert!(!probes
            .iter()
            .any(|p| claim.numerator.matches(p) || claim.denominator.matches(p)));
    }
    // exp33: 7 connection counts (the seed's 5, and 1 and 10 below saturation) x short/long.
    assert_eq!(load("exp33").cells().len(), 14);
    // select-vs-epoll: connect-storm 100..1000 step 100 and sustain 100..800, for 2 servers.
    assert_eq!(load("select-vs-epoll").cells().len(), 2 * 10 + 2 * 8);
}
