//! The lab image: the same id for the same binaries, and `--down`'s rule for stale images.

use std::process::Command;

use echolab_runtime::docker::cleanup;
use echolab_testkit::TempDir;

use super::common::*;

#[test]
fn the_image_id_is_the_same_for_the_same_binaries() {
    let e = engine();
    let dir = TempDir::new("up-docker-image");
    let bins = snapshot_bins(&dir);
    let rt = runtime();
    let first = rt
        .block_on(echolab_runtime::docker::image::ensure(
            &e.docker,
            &bins,
            &[],
            None,
        ))
        .unwrap();
    let archive = echolab_runtime::image_archive::build_archive(&bins, &[]).unwrap();
    assert_eq!(
        first.id, archive.id,
        "the engine's id is the archive's config digest"
    );
    let again = rt
        .block_on(echolab_runtime::docker::image::ensure(
            &e.docker,
            &bins,
            &[],
            None,
        ))
        .unwrap();
    assert_eq!(first.id, again.id);
    assert!(rt
        .block_on(echolab_runtime::docker::image::image_id(
            &e.docker,
            "echolab:latest"
        ))
        .unwrap()
        .is_some());
}

/// An empty image imported as `tag` (`docker import`, so each gets an id of its own).
fn import(tag: &str) {
    succeeds(Command::new("sh").args([
        "-c",
        &format!("tar cf - --files-from /dev/null | docker import - {tag}"),
    ]));
}

/// The tags of repository `repo` on the machine's engine, sorted.
fn tags_of(repo: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args(["images", "--format", "{{.Repository}}:{{.Tag}}", repo])
        .output()
        .expect("docker runs");
    let mut tags: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    tags.sort();
    tags
}

/// `--down`'s stale-image rule (`cleanup::remove_stale_images`) on the machine's engine, in
/// a repository of this test's own (the lab's `echolab` is shared with other tests' runs): an
/// image with only content tags goes; one that also has a name tag, a name-tagged one and one
/// a container uses stay.
#[test]
fn stale_images_are_those_with_only_content_tags_and_in_use_ones_stay() {
    let docker = engine().docker;
    let repo = format!("echolabstaletest{}", std::process::id());
    import(&format!("{repo}:0a1b2c3d4e5f"));
    import(&format!("{repo}:0a1b2c3d4e60"));
    let tagged = std::process::Command::new("docker")
        .args([
            "tag",
            &format!("{repo}:0a1b2c3d4e60"),
            &format!("{repo}:latest"),
        ])
        .status()
        .unwrap();
    assert!(tagged.success());
    import(&format!("{repo}:nix"));
    import(&format!("{repo}:ffff00001111"));
    succeeds(Command::new("docker").args([
        "create",
        "--name",
        &repo,
        &format!("{repo}:ffff00001111"),
        "none",
    ]));
    let removed = runtime()
        .block_on(cleanup::remove_stale_images(&docker, &repo))
        .unwrap();
    let left = tags_of(&repo);
    let _ = std::process::Command::new("docker")
        .args(["rm", "-f", &repo])
        .output();
    for t in &left {
        let _ = std::process::Command::new("docker")
            .args(["rmi", "-f", t])
            .output();
    }
    assert_eq!(removed, [format!("{repo}:0a1b2c3d4e5f")]);
    let mut expected = vec![
        format!("{repo}:0a1b2c3d4e60"),
        format!("{repo}:ffff00001111"),
        format!("{repo}:latest"),
        format!("{repo}:nix"),
    ];
    expected.sort();
    assert_eq!(left, expected);
}
