//! The symbols the application's calls land on (`ibv_create_qp`, `ibv_destroy_qp`), each
//! calling the real one (`dlsym(RTLD_NEXT)`) and then telling the agent; and the mlx5 provider
//! reached at run time (`dlopen("libmlx5.so.1")`), so the library links nothing of rdma-core.
//! Nothing here may unwind into the application: each hook catches panics.

use crate::abi::{
    CreateQpFn, DestroyQpFn, DeviceNameFn, IbvQp, InitObjFn, IsSupportedFn, Mlx5dvCq, Mlx5dvObj,
    Mlx5dvQp, MLX5DV_OBJ_CQ, MLX5DV_OBJ_QP,
};
use crate::report::{on_created, say, Mlx5, Outcome, Reporter};
use resex_proto::preload::PreloadMsg;
use std::collections::HashSet;
use std::ffi::{c_void, CStr};
use std::sync::{Mutex, OnceLock};

/// The mlx5 provider's entry points, when it is installed.
struct Dl {
    init_obj: Option<InitObjFn>,
    is_supported: Option<IsSupportedFn>,
    device_name: Option<DeviceNameFn>,
}

/// A symbol of `handle`, or `None`.
fn sym(handle: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with a valid handle (or a pseudo-handle) and a NUL-terminated name.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

fn dl() -> &'static Dl {
    static DL: OnceLock<Dl> = OnceLock::new();
    DL.get_or_init(|| {
        // SAFETY: dlopen of a library name; a null result is handled.
        let h = unsafe { libc::dlopen(c"libmlx5.so.1".as_ptr(), libc::RTLD_NOW) };
        let from = |name: &CStr| (!h.is_null()).then(|| sym(h, name)).flatten();
        // SAFETY: each pointer is the named function of rdma-core 44, whose signature the
        // type gives (`abi`).
        unsafe {
            Dl {
                init_obj: from(c"mlx5dv_init_obj").map(|p| std::mem::transmute::<_, InitObjFn>(p)),
                is_supported: from(c"mlx5dv_is_supported")
                    .map(|p| std::mem::transmute::<_, IsSupportedFn>(p)),
                device_name: sym(libc::RTLD_DEFAULT, c"ibv_get_device_name")
                    .map(|p| std::mem::transmute::<_, DeviceNameFn>(p)),
            }
        }
    })
}

/// The QP's `struct ibv_device *`.
fn device(qp: &IbvQp) -> Option<*mut c_void> {
    // SAFETY: a QP the provider returned points at its live context.
    let d = unsafe { qp.context.as_ref() }?.device;
    (!d.is_null()).then_some(d)
}

impl Mlx5 for Dl {
    fn device_name(&self, qp: &IbvQp) -> Option<String> {
        let (f, d) = (self.device_name?, device(qp)?);
        // SAFETY: ibv_get_device_name of a live device returns its NUL-terminated name.
        let p = unsafe { f(d) };
        // SAFETY: checked non-null; the string lives as long as the device.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    fn is_mlx5(&self, qp: &IbvQp) -> bool {
        match (self.is_supported, device(qp)) {
            // SAFETY: a live device pointer, the function rdma-core exports for it.
            (Some(f), Some(d)) => unsafe { f(d) },
            _ => false,
        }
    }

    fn qp(&self, qp: &IbvQp) -> Option<Mlx5dvQp> {
        let f = self.init_obj?;
        // SAFETY: an all-zero mlx5dv_qp is a valid (null, 0) value of plain fields.
        let mut out: Mlx5dvQp = unsafe { std::mem::zeroed() };
        let mut obj = Mlx5dvObj::default();
        obj.qp.input = std::ptr::from_ref(qp).cast_mut().cast();
        obj.qp.output = (&raw mut out).cast();
        // SAFETY: `obj` names a live QP and a place for its view, as mlx5dv_init_obj wants.
        (unsafe { f(&raw mut obj, MLX5DV_OBJ_QP) } == 0).then_some(out)
    }

    fn cq(&self, cq: *mut c_void) -> Option<Mlx5dvCq> {
        let f = self.init_obj?;
        if cq.is_null() {
            return None;
        }
        // SAFETY: an all-zero mlx5dv_cq is a valid value of plain fields.
        let mut out: Mlx5dvCq = unsafe { std::mem::zeroed() };
        let mut obj = Mlx5dvObj::default();
        obj.cq.input = cq;
        obj.cq.output = (&raw mut out).cast();
        // SAFETY: as above, for a live CQ of the QP.
        (unsafe { f(&raw mut obj, MLX5DV_OBJ_CQ) } == 0).then_some(out)
    }
}

fn reporter() -> &'static Reporter {
    static R: OnceLock<Reporter> = OnceLock::new();
    R.get_or_init(|| {
        // SAFETY: registers a child handler that only calls close(2).
        unsafe {
            libc::pthread_atfork(None, None, Some(crate::report::close_inherited));
        }
        Reporter::from_env()
    })
}

/// QPNs reported and not yet destroyed.
fn reported() -> &'static Mutex<HashSet<u32>> {
    static S: OnceLock<Mutex<HashSet<u32>>> = OnceLock::new();
    S.get_or_init(Mutex::default)
}

/// The real function `name` further down the search order.
fn next(name: &CStr) -> Option<*mut c_void> {
    sym(libc::RTLD_NEXT, name)
}

fn observe(qp: &IbvQp) {
    let o = on_created(dl(), reporter(), qp);
    if let Outcome::Reported(_) = o {
        reported()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(qp.qp_num);
    }
    if let Some(line) = say(&o, qp.qp_num) {
        if reporter().first_word() {
            eprintln!("{line}");
        }
    }
}

/// `ibv_create_qp`, as the application calls it: the real one, then the report.
///
/// # Safety
/// As `ibv_create_qp`: `pd` and `attr` are the application's valid verbs objects.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(pd: *mut c_void, attr: *mut c_void) -> *mut IbvQp {
    let Some(real) = next(c"ibv_create_qp") else {
        eprintln!("resex-preload: no ibv_create_qp below the interposer (libibverbs not loaded)");
        return std::ptr::null_mut();
    };
    // SAFETY: the real ibv_create_qp, whose signature this is.
    let real: CreateQpFn = unsafe { std::mem::transmute::<*mut c_void, CreateQpFn>(real) };
    // SAFETY: the application's arguments, passed on unchanged.
    let qp = unsafe { real(pd, attr) };
    // SAFETY: a non-null result is the provider's live QP.
    if let Some(q) = unsafe { qp.as_ref() } {
        let _ = std::panic::catch_unwind(|| observe(q));
    }
    qp
}

/// `ibv_destroy_qp`, as the application calls it: the real one, then (if it was reported and
/// is gone) the report.
///
/// # Safety
/// As `ibv_destroy_qp`: `qp` is a QP the application created.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut IbvQp) -> i32 {
    let Some(real) = next(c"ibv_destroy_qp") else {
        return libc::ENOSYS;
    };
    // SAFETY: the real ibv_destroy_qp, whose signature this is.
    let real: DestroyQpFn = unsafe { std::mem::transmute::<*mut c_void, DestroyQpFn>(real) };
    // SAFETY: read before the QP is freed.
    let qpn = unsafe { qp.as_ref() }.map(|q| q.qp_num);
    // SAFETY: the application's argument, passed on unchanged.
    let rc = unsafe { real(qp) };
    if let (0, Some(qpn)) = (rc, qpn) {
        let _ = std::panic::catch_unwind(|| {
            let was = reported()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&qpn);
            if was {
                let _ = reporter().send(&PreloadMsg::Destroyed { qpn });
            }
        });
    }
    rc
}
