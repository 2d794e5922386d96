//! The C structures the interposer reads, as rdma-core 44 declares them
//! (`infiniband/verbs.h`, `infiniband/mlx5dv.h`); `tests/layout.rs` checks every offset against
//! the headers with gcc.

use std::ffi::c_void;

/// `struct ibv_context`, its first field.
#[repr(C)]
#[derive(Debug)]
pub struct IbvContext {
    /// `struct ibv_device *device`.
    pub device: *mut c_void,
}

/// `struct ibv_qp`, up to `qp_type` (what follows is never read).
#[repr(C)]
#[derive(Debug)]
pub struct IbvQp {
    /// `struct ibv_context *context`.
    pub context: *mut IbvContext,
    /// `void *qp_context`.
    pub qp_context: *mut c_void,
    /// `struct ibv_pd *pd`.
    pub pd: *mut c_void,
    /// `struct ibv_cq *send_cq`.
    pub send_cq: *mut c_void,
    /// `struct ibv_cq *recv_cq`.
    pub recv_cq: *mut c_void,
    /// `struct ibv_srq *srq`.
    pub srq: *mut c_void,
    /// `uint32_t handle`.
    pub handle: u32,
    /// `uint32_t qp_num`.
    pub qp_num: u32,
    /// `enum ibv_qp_state state`.
    pub state: u32,
    /// `enum ibv_qp_type qp_type`.
    pub qp_type: u32,
}

/// `struct mlx5dv_qp`'s work queue (`sq`, `rq`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Mlx5dvWq {
    /// `void *buf`.
    pub buf: *mut c_void,
    /// `uint32_t wqe_cnt`.
    pub wqe_cnt: u32,
    /// `uint32_t stride`.
    pub stride: u32,
}

/// `struct mlx5dv_qp`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Mlx5dvQp {
    /// `__be32 *dbrec`.
    pub dbrec: *mut u32,
    /// `sq`.
    pub sq: Mlx5dvWq,
    /// `rq`.
    pub rq: Mlx5dvWq,
    /// `bf.reg`.
    pub bf_reg: *mut c_void,
    /// `bf.size` (and padding).
    pub bf_size: u64,
    /// `uint64_t comp_mask`.
    pub comp_mask: u64,
    /// `off_t uar_mmap_offset`.
    pub uar_mmap_offset: i64,
    /// `tirn`, `tisn`, `rqn`, `sqn`.
    pub tirn: u32,
    /// `tisn`.
    pub tisn: u32,
    /// `rqn`.
    pub rqn: u32,
    /// `sqn`.
    pub sqn: u32,
    /// `uint64_t tir_icm_addr`.
    pub tir_icm_addr: u64,
}

/// `struct mlx5dv_cq`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Mlx5dvCq {
    /// `void *buf`.
    pub buf: *mut c_void,
    /// `__be32 *dbrec`.
    pub dbrec: *mut u32,
    /// `uint32_t cqe_cnt`.
    pub cqe_cnt: u32,
    /// `uint32_t cqe_size`.
    pub cqe_size: u32,
    /// `void *cq_uar`.
    pub cq_uar: *mut c_void,
    /// `uint32_t cqn`.
    pub cqn: u32,
    /// `uint64_t comp_mask`.
    pub comp_mask: u64,
}

/// One `{in, out}` pair of `struct mlx5dv_obj`.
#[repr(C)]
#[derive(Debug)]
pub struct ObjPair {
    /// The verbs object.
    pub input: *mut c_void,
    /// Where its mlx5 view is written.
    pub output: *mut c_void,
}

/// `struct mlx5dv_obj`: qp, cq, srq, rwq, dm, ah, pd.
#[repr(C)]
#[derive(Debug)]
pub struct Mlx5dvObj {
    /// `qp`.
    pub qp: ObjPair,
    /// `cq`.
    pub cq: ObjPair,
    /// `srq`, `rwq`, `dm`, `ah`, `pd`: never asked for.
    pub rest: [ObjPair; 5],
}

impl Default for Mlx5dvObj {
    fn default() -> Self {
        let none = || ObjPair {
            input: std::ptr::null_mut(),
            output: std::ptr::null_mut(),
        };
        Self {
            qp: none(),
            cq: none(),
            rest: [none(), none(), none(), none(), none()],
        }
    }
}

/// `MLX5DV_OBJ_QP`.
pub const MLX5DV_OBJ_QP: u64 = 1 << 0;
/// `MLX5DV_OBJ_CQ`.
pub const MLX5DV_OBJ_CQ: u64 = 1 << 1;

/// `int mlx5dv_init_obj(struct mlx5dv_obj *obj, uint64_t obj_type)`.
pub type InitObjFn = unsafe extern "C" fn(*mut Mlx5dvObj, u64) -> i32;
/// `bool mlx5dv_is_supported(struct ibv_device *device)`.
pub type IsSupportedFn = unsafe extern "C" fn(*mut c_void) -> bool;
/// `const char *ibv_get_device_name(struct ibv_device *device)`.
pub type DeviceNameFn = unsafe extern "C" fn(*mut c_void) -> *const libc::c_char;
/// `struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)`.
pub type CreateQpFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> *mut IbvQp;
/// `int ibv_destroy_qp(struct ibv_qp *qp)`.
pub type DestroyQpFn = unsafe extern "C" fn(*mut IbvQp) -> i32;
