//! The userspace wire and calibration, live, in client/link/server network namespaces (root
//! and iproute2 needed). Every namespace and process is removed by Drop guards.

#[path = "wire/common.rs"]
mod common;

#[path = "wire/calibration.rs"]
mod calibration;

#[path = "wire/idle.rs"]
mod idle;

#[path = "wire/end_to_end.rs"]
mod end_to_end;

#[path = "wire/setup.rs"]
mod setup;
