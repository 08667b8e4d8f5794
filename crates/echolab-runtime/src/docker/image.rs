//! Making the lab image available to the engine: the deterministic archive of
//! [`crate::image_archive`] loaded through `/images/load` (skipped when the engine has that image id
//! already), or a prebuilt `--image` (e.g. the Nix-built one after `docker load`). Either way
//! it is also tagged `echolab:latest` for compose.

use std::path::Path;
use std::time::Duration;

use anyhow::anyhow;
use bollard::query_parameters::{ImportImageOptions, TagImageOptionsBuilder};
use bollard::Docker;
use echolab_core::results::ImageInfo;
use futures_util::StreamExt as _;

use super::deadlines::{call, gave_up, within, CALL};
use super::engine::failed;
use crate::image_archive::{build_archive, ImageArchive, LATEST_TAG};

/// The engine's id of `reference`, or None when it has no such image.
///
/// # Errors
/// Any engine error other than "no such image".
pub async fn image_id(docker: &Docker, reference: &str) -> anyhow::Result<Option<String>> {
    let answer = super::deadlines::within(docker, CALL, docker.inspect_image(reference))
        .await
        .map_err(|gave| gave_up(gave, "inspect image", reference))?;
    match answer {
        Ok(i) => Ok(i.id),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(None),
        Err(e) => Err(failed("inspect image", reference, e)),
    }
}

async fn tag_latest(docker: &Docker, reference: &str) -> anyhow::Result<()> {
    let (repo, tag) = LATEST_TAG.split_once(':').expect("LATEST_TAG has a tag");
    let opts = TagImageOptionsBuilder::default()
        .repo(repo)
        .tag(tag)
        .build();
    call(
        docker,
        "tag image",
        &format!("{reference} as {LATEST_TAG}"),
        docker.tag_image(reference, Some(opts)),
    )
    .await
}

/// Loads the image archive `tar` (`docker save`'s format) into the engine; `tag` names it in
/// errors.
///
/// # Errors
/// The engine refused it.
pub async fn import(docker: &Docker, tar: Vec<u8>, tag: &str) -> anyhow::Result<()> {
    let body = bollard::body_full(bytes::Bytes::from(tar));
    let mut progress = docker.import_image(
        ImportImageOptions {
            quiet: true,
            ..Default::default()
        },
        body,
        None,
    );
    // The archive is tens of megabytes: the load may take long, as long as the engine answers.
    while let Some(item) = within(docker, Duration::MAX, progress.next())
        .await
        .map_err(|gave| gave_up(gave, "load image", tag))?
    {
        item.map_err(|e| failed("load image", tag, e))?;
    }
    Ok(())
}

/// Loads `archive` unless the engine has its image already; tags it `echolab:latest`.
///
/// # Errors
/// The load failed, or the engine's id differs from the archive's (the archive would not be
/// deterministic, or the engine rewrote it).
pub async fn load(docker: &Docker, archive: &ImageArchive) -> anyhow::Result<bool> {
    if image_id(docker, &archive.tag).await?.as_deref() == Some(archive.id.as_str()) {
        tag_latest(docker, &archive.tag).await?;
        return Ok(false);
    }
    import(docker, archive.archive.clone(), &archive.tag).await?;
    let got = image_id(docker, &archive.tag).await?;
    if got.as_deref() != Some(archive.id.as_str()) {
        return Err(anyhow!(
            "docker: load image {}: engine has id {got:?}, expected {}",
            archive.tag,
            archive.id
        ));
    }
    tag_latest(docker, &archive.tag).await?;
    Ok(true)
}

/// The image for a run: `prebuilt` if given (must exist), else built from `bin_dir` and loaded.
///
/// # Errors
/// A missing binary or prebuilt image, or an engine error.
pub async fn ensure(
    docker: &Docker,
    bin_dir: &Path,
    programs: &[String],
    prebuilt: Option<&str>,
) -> anyhow::Result<ImageInfo> {
    if let Some(reference) = prebuilt {
        let id = image_id(docker, reference).await?.ok_or_else(|| {
            anyhow!(
                "docker: image {reference} not found; load it first (e.g. `docker load < result`)"
            )
        })?;
        tag_latest(docker, reference).await?;
        return Ok(ImageInfo {
            reference: reference.to_string(),
            id,
            binaries: Default::default(),
        });
    }
    let archive = tokio::task::block_in_place(|| build_archive(bin_dir, programs))?;
    load(docker, &archive).await?;
    Ok(ImageInfo {
        reference: archive.tag.clone(),
        id: archive.id.clone(),
        binaries: archive.contents.clone(),
    })
}
