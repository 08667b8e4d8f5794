//! PLACEHOLDER until its owner writes the model; must not survive into a commit that claims the model.

use super::{Running, ServeCtx};

/// Level- or edge-triggered readiness.
pub enum Trigger {
    Level,
    Edge,
}

pub fn start(_ctx: ServeCtx, _trigger: Trigger) -> anyhow::Result<Running> {
    anyhow::bail!("this model is not built yet")
}
