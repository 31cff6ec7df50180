//! The `hef` backend: a HEF on a device (simulated, or real with feature `hailo`).

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::model::Checkpoint;
use crate::probe::schema::BackendSpec;

pub fn open(label: &str, _spec: &BackendSpec, _ckpt: &Checkpoint) -> Result<Box<dyn Backend>> {
    Err(Error::Unsupported(format!("backend `{label}`: the hef backend is not built yet")))
}
