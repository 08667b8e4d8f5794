//! PLACEHOLDER until its owner writes the model; must not survive into a commit that claims the model.

use super::{Running, ServeCtx};

pub fn start(_ctx: ServeCtx) -> anyhow::Result<Running> {
    anyhow::bail!("this model is not built yet")
}
