//! The `servers:` entries of a matrix block: an echo-server model by name, or the
//! researcher's own server as a command that serves the echo protocol on a port.

use serde::{Deserialize, Serialize};

use crate::cmd::{CustomServerCmd, ServerModel};

/// One entry of a block's `servers:` list.
///
/// ```yaml
/// servers:
///   - epoll-et                                  # an echo-server model
///   - name: socat-pipe                          # your own server
///     command: [socat, "TCP-LISTEN:7000,fork,reuseaddr", PIPE]
///     port: 7000
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, try_from = "serde_yaml::Value")]
pub enum ServerEntry {
    /// An echo-server model's name (`--model`); checked when the experiment loads, so that
    /// the error names the block.
    Model(String),
    /// A server that is not an echo-server model.
    Custom(CustomServer),
}

/// The researcher's own server: `command` must listen on `port` on every address and write
/// back every byte it reads (the echo protocol, `echolab_core::protocol`). The lab checks that
/// it echoes before any cell starts and runs it under the same CPU plan, privileges and
/// limits as echo-server; its CPU and memory are sampled, its system-call counters are not
/// (echo-server counts its own).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomServer {
    /// Its name in cell ids and the report: lowercase letters, digits and `-`, and not an
    /// echo-server model's name.
    pub name: String,
    /// The program and its arguments. A bare program name is looked up on this machine's
    /// PATH and copied into the lab image with its shared libraries (as `ldd` lists them);
    /// an absolute path is copied from there. Files the program reads at run time (other than
    /// its libraries) are not copied.
    pub command: Vec<String>,
    /// The TCP port it listens on.
    pub port: u16,
    /// An image of your own to run it in instead of the lab image: not supported (the lab
    /// image is built here without a registry, and a server host needs the lab's own
    /// programs); an experiment that sets it is refused, naming the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

impl CustomServer {
    /// The command that serves it under the launcher's `__serve` job, announced on `bind`.
    pub fn cmd(&self, bind: std::net::IpAddr) -> CustomServerCmd {
        CustomServerCmd {
            name: self.name.clone(),
            bind,
            port: self.port,
            command: self.command.clone(),
        }
    }

    /// The program's name (`command[0]`'s last path component): what the lab image holds.
    pub fn program(&self) -> &str {
        let first = self.command.first().map_or("", String::as_str);
        first.rsplit('/').next().unwrap_or(first)
    }

    /// Checks the fields; the message names the field.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        if self.name.is_empty() || !self.name.chars().all(ok_char) {
            return Err(format!(
                "name: {:?} must be lowercase letters, digits and '-' (it goes into file names)",
                self.name
            ));
        }
        if self.name.parse::<ServerModel>().is_ok() {
            return Err(format!(
                "name: {:?} is an echo-server model's name; give your server another",
                self.name
            ));
        }
        if self.command.first().is_none_or(|p| p.trim().is_empty()) {
            return Err(format!(
                "command: server {:?} needs a program to run",
                self.name
            ));
        }
        if self.port == 0 {
            return Err(format!(
                "port: server {:?} must name the port its command listens on (1-65535)",
                self.name
            ));
        }
        if let Some(image) = &self.image {
            return Err(format!(
                "image: server {:?} names image {image:?}, which the lab cannot run servers in; \
                 leave `image:` out and the program is taken from this machine's PATH into the lab image",
                self.name
            ));
        }
        Ok(())
    }
}

impl ServerEntry {
    /// The name cells carry: the model's or the custom server's.
    pub fn name(&self) -> &str {
        match self {
            ServerEntry::Model(n) => n,
            ServerEntry::Custom(c) => &c.name,
        }
    }
}

impl From<&str> for ServerEntry {
    fn from(name: &str) -> Self {
        ServerEntry::Model(name.to_string())
    }
}

impl TryFrom<serde_yaml::Value> for ServerEntry {
    type Error = String;

    /// A string is a model's name; a mapping is a [`CustomServer`], whose own errors (an
    /// unknown key, a missing field) are kept rather than an untagged enum's "did not match".
    fn try_from(v: serde_yaml::Value) -> Result<Self, String> {
        match v {
            serde_yaml::Value::String(s) => Ok(ServerEntry::Model(s)),
            m @ serde_yaml::Value::Mapping(_) => serde_yaml::from_value(m)
                .map(ServerEntry::Custom)
                .map_err(|e| format!("a custom server {{name, command, port}}: {e}")),
            other => Err(format!(
                "a server is a model's name or {{name, command, port}}, not {other:?}"
            )),
        }
    }
}
