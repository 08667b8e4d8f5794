//! Teardown of a run on every engine it used, together and bounded
//! (`crate::docker::cleanup::tear_down`): an engine that does not answer costs
//! `docker::deadlines::PING`, one that stops answering midway at most
//! `docker::deadlines::TEARDOWN`, so that a run, or Ctrl-C, ends within seconds whatever the
//! engines do. What could not be removed is named from the manifest's host records, with
//! the `--down` call that removes it once the engine answers again.

use std::collections::BTreeMap;
use std::path::Path;

use crate::docker;
use crate::docker::engine::Engine;
use crate::docker::lab::LabEngines;

/// The one engine of a run without a lab, holding every record of the manifest's `hosts`.
pub(super) fn one_engine(
    e: &Engine,
    hosts: &BTreeMap<String, serde_json::Value>,
) -> Vec<EngineToClear> {
    vec![EngineToClear {
        name: String::new(),
        endpoint: String::new(),
        docker: e.docker.clone(),
        records: hosts.keys().cloned().collect(),
    }]
}

/// Every engine of a lab run, the server's first, each with the manifest's host records on it.
pub(super) fn lab_engines(
    engines: &LabEngines,
    hosts: &BTreeMap<String, serde_json::Value>,
) -> Vec<EngineToClear> {
    let clients: Vec<&str> = engines.clients.iter().map(|c| c.name.as_str()).collect();
    engines
        .all()
        .into_iter()
        .map(|e| EngineToClear {
            name: e.name.clone(),
            endpoint: e.endpoint.clone(),
            docker: e.engine.docker.clone(),
            records: records_on(&e.name, &clients, hosts),
        })
        .collect()
}

/// One engine of the run: the lab file's name and endpoint (both empty for the one engine of
/// a run without `--lab`) and the client.
pub(super) struct EngineToClear {
    /// The lab file's name for it ("" without a lab).
    pub(super) name: String,
    /// Its endpoint as the lab file gives it ("" without a lab).
    pub(super) endpoint: String,
    /// The connection.
    pub(super) docker: docker::Docker,
    /// The manifest's host records on it (keys of `Manifest::hosts`), for naming what is left.
    pub(super) records: Vec<String>,
}

/// Removes run `run_id`'s objects from every engine at once, each within
/// `docker::deadlines::TEARDOWN`; returns one line per engine that kept something, naming it and
/// what the manifest's `hosts` say is there, and how to remove it (`lab`: the lab file).
pub(super) async fn tear_down(
    engines: Vec<EngineToClear>,
    run_id: &str,
    hosts: &BTreeMap<String, serde_json::Value>,
    lab: Option<&Path>,
) -> Vec<String> {
    let mut all = tokio::task::JoinSet::new();
    for (i, e) in engines.into_iter().enumerate() {
        let run_id = run_id.to_string();
        all.spawn(async move {
            let cleared = docker::cleanup::tear_down(&e.docker, &run_id).await;
            (i, e, cleared)
        });
    }
    let mut kept = Vec::new();
    while let Some(done) = all.join_next().await {
        match done {
            Ok((i, e, Err(why))) => kept.push((i, said(&e, &why, run_id, hosts, lab))),
            Ok((_, _, Ok(_))) => {}
            Err(e) => kept.push((usize::MAX, format!("teardown: {e}"))),
        }
    }
    kept.sort();
    kept.into_iter().map(|(_, line)| line).collect()
}

/// The line for engine `e`, which kept run `run_id`'s objects because of `why`.
fn said(
    e: &EngineToClear,
    why: &str,
    run_id: &str,
    hosts: &BTreeMap<String, serde_json::Value>,
    lab: Option<&Path>,
) -> String {
    let left = left_on(&e.records, hosts);
    let down = match lab {
        Some(path) => format!("echolab-up --down --lab {}", path.display()),
        None => "echolab-up --down".to_string(),
    };
    let on = if e.name.is_empty() {
        String::new()
    } else {
        format!("engine {} ({}): ", e.name, e.endpoint)
    };
    format!(
        "{on}{why}; left there: {left} (labelled {}={run_id}); `{down}` removes them once the engine answers",
        docker::RUN_LABEL
    )
}

/// What the manifest's host records `keys` name: their containers, and the networks of a
/// `networks` record; "its containers and networks" when they name none (teardown came
/// before they were recorded).
fn left_on(keys: &[String], hosts: &BTreeMap<String, serde_json::Value>) -> String {
    let (mut containers, mut networks) = (Vec::new(), Vec::new());
    for key in keys {
        let Some(record) = hosts.get(key) else {
            continue;
        };
        if key == "networks" || key.starts_with("networks-") {
            if let Some(map) = record.as_object() {
                networks.extend(map.keys().cloned());
            }
        } else if let Some(name) = record.get("container").and_then(|c| c.as_str()) {
            containers.push(name.to_string());
        }
    }
    let list = |kind: &str, names: &[String]| {
        (!names.is_empty()).then(|| format!("{kind} {}", names.join(", ")))
    };
    let named: Vec<String> = [list("containers", &containers), list("networks", &networks)]
        .into_iter()
        .flatten()
        .collect();
    if named.is_empty() {
        "its containers and networks".into()
    } else {
        named.join("; ")
    }
}

/// The manifest's host records on engine `name` of a lab run whose client engines are
/// `clients` (in the lab file's order): those that name it (`engine`), and the `networks`
/// record of each client machine (`networks`, `networks-2`, ...), made on that machine's engine.
fn records_on(
    name: &str,
    clients: &[&str],
    hosts: &BTreeMap<String, serde_json::Value>,
) -> Vec<String> {
    hosts
        .iter()
        .filter(|(key, record)| {
            if let Some(i) = clients.iter().position(|c| *c == name) {
                if **key == echolab_core::lab_plan::host_name("networks", i) {
                    return true;
                }
            }
            record.get("engine").and_then(|e| e.as_str()) == Some(name)
        })
        .map(|(key, _)| key.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hosts() -> BTreeMap<String, serde_json::Value> {
        [
            (
                "server",
                json!({"container": "echolab-r1-server", "engine": "a"}),
            ),
            (
                "client",
                json!({"container": "echolab-r1-client", "engine": "b"}),
            ),
            (
                "link",
                json!({"container": "echolab-r1-link", "engine": "b"}),
            ),
            (
                "client-2",
                json!({"container": "echolab-r1-client-2", "engine": "c"}),
            ),
            ("networks", json!({"echolab-r1-cnet": "10.1.0.0/24"})),
            ("networks-2", json!({"echolab-r1-cnet-2": "10.2.0.0/24"})),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    #[test]
    fn what_is_left_on_an_engine_is_named_from_its_records() {
        let h = hosts();
        let on_b = records_on("b", &["b", "c"], &h);
        assert_eq!(on_b, ["client", "link", "networks"]);
        assert_eq!(
            left_on(&on_b, &h),
            "containers echolab-r1-client, echolab-r1-link; networks echolab-r1-cnet"
        );
        let on_c = records_on("c", &["b", "c"], &h);
        assert_eq!(
            left_on(&on_c, &h),
            "containers echolab-r1-client-2; networks echolab-r1-cnet-2"
        );
        assert_eq!(
            left_on(&records_on("a", &["b", "c"], &h), &h),
            "containers echolab-r1-server"
        );
        assert_eq!(left_on(&[], &h), "its containers and networks");
    }
}
