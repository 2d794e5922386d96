//! `libresex_preload.so`: metering an unmodified mlx5 application. Loaded with
//! `LD_PRELOAD=libresex_preload.so`, it interposes `ibv_create_qp` and `ibv_destroy_qp`; after
//! the real call it asks the mlx5 provider where the QP's send queue, doorbell record and CQs are
//! (`mlx5dv_init_obj`) and tells the guest agent over its Unix socket
//! (`resex_proto::preload`), which registers them with the host; a destroyed QP, or a process
//! that exits, is unregistered.
//!
//! - [`abi`]: the C structures read, checked against rdma-core's headers.
//! - [`report`]: describing a QP and telling the agent (testable without a device).
//! - [`hooks`]: the interposed symbols and the provider reached with `dlopen`.
//!
//! On a QP that is not on an mlx5 device (soft-RoCE, say), or with no agent listening, it says
//! so in one line on the application's stderr, once per process, and changes nothing else.
//!
//! **A side effect to know.** rdma-core marks a CQ given to `mlx5dv_init_obj` as owned by
//! direct verbs, and then no longer removes a destroyed QP's unpolled completions from it: an
//! application that destroys a QP while its CQ still holds that QP's completions may poll them.

pub mod abi;
pub mod hooks;
pub mod report;
