//! The xen backend against a fake Xen behind the same [`XenOps`].

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Guest RAM of the fake: one boxed page per gfn (`None`: a hole Xen refuses to map).
struct FakeMem {
    pages: Vec<Option<Box<[u8; 4096]>>>,
}

struct FakeBatch {
    regions: Vec<Result<RawRegion, PageError>>,
}

impl PageBatch for FakeBatch {
    fn page(&self, i: usize) -> Result<&RawRegion, PageError> {
        match self.regions.get(i) {
            Some(Ok(r)) => Ok(r),
            Some(Err(e)) => Err(*e),
            None => Err(PageError::Beyond),
        }
    }
}

struct FakeXen {
    doms: Mutex<Vec<XenDomain>>,
    sched: Mutex<HashMap<u32, SchedParams>>,
    mem: Mutex<HashMap<u32, FakeMem>>,
    xs: Mutex<HashMap<String, String>>,
    maps: AtomicUsize,
}

impl FakeXen {
    fn new() -> Self {
        let dom = |domid, name: &str, s| XenDomain {
            domid,
            name: name.into(),
            uuid: format!("00000000-0000-0000-0000-00000000000{domid}"),
            vcpus: 2,
            ram_bytes: 1 << 20,
            cpu_time_ns: 7_000_000 * u64::from(domid),
            scheduler: s,
            pv: domid == PV_DOM,
        };
        let mut pages: Vec<Option<Box<[u8; 4096]>>> =
            (0..256).map(|_| Some(Box::new([0u8; 4096]))).collect();
        pages[100] = None; // a hole
                           // The PV domain's pages are machine frames, found through its p2m.
        let machine = (0..MACHINE_FRAMES)
            .map(|_| Some(Box::new([0u8; 4096])))
            .collect();
        Self {
            doms: Mutex::new(vec![
                dom(3, "web", Some(Scheduler::Credit)),
                dom(4, "db", Some(Scheduler::Credit2)),
                dom(5, "rt", None),
                dom(PV_DOM, "pv", Some(Scheduler::Credit2)),
            ]),
            sched: Mutex::new(HashMap::from([
                (
                    3,
                    SchedParams {
                        weight: 256,
                        cap: 0,
                    },
                ),
                (
                    4,
                    SchedParams {
                        weight: 512,
                        cap: 50,
                    },
                ),
            ])),
            mem: Mutex::new(HashMap::from([
                (3, FakeMem { pages }),
                (PV_DOM, FakeMem { pages: machine }),
            ])),
            xs: Mutex::new(HashMap::new()),
            maps: AtomicUsize::new(0),
        }
    }
}

impl XenOps for FakeXen {
    fn list(&self) -> Result<Vec<XenDomain>, BackendError> {
        Ok(self.doms.lock().unwrap().clone())
    }
    fn sched_get(&self, domid: u32, _s: Scheduler) -> Result<SchedParams, BackendError> {
        self.sched
            .lock()
            .unwrap()
            .get(&domid)
            .copied()
            .ok_or_else(|| BackendError::NoDomain(domid.to_string()))
    }
    fn sched_set(&self, domid: u32, _s: Scheduler, p: SchedParams) -> Result<(), BackendError> {
        self.sched.lock().unwrap().insert(domid, p);
        Ok(())
    }
    fn map(&self, domid: u32, gfns: &[u64]) -> Result<Box<dyn PageBatch>, BackendError> {
        self.maps.fetch_add(1, Ordering::Relaxed);
        let mut mem = self.mem.lock().unwrap();
        let m = mem
            .get_mut(&domid)
            .ok_or_else(|| BackendError::NoDomain(domid.to_string()))?;
        let regions = gfns
            .iter()
            .map(
                |&g| match usize::try_from(g).ok().and_then(|g| m.pages.get_mut(g)) {
                    Some(Some(p)) => {
                        // SAFETY: the boxed page lives as long as the fake (the test), never moves,
                        // and is only accessed through the region's atomic copies meanwhile.
                        Ok(unsafe { RawRegion::new(p.as_mut_ptr(), 4096) })
                    }
                    _ => Err(PageError::Refused {
                        errno: libc::EFAULT,
                    }),
                },
            )
            .collect();
        Ok(Box::new(FakeBatch { regions }))
    }
    fn frames(&self, domid: u32, pfns: &[u64]) -> Result<Vec<Option<u64>>, BackendError> {
        assert_eq!(domid, PV_DOM, "only a PV domain's frames are translated");
        Ok(pfns.iter().map(|&p| p2m(p)).collect())
    }
    fn xs_read(&self, path: &str) -> Result<Option<String>, BackendError> {
        Ok(self.xs.lock().unwrap().get(path).cloned())
    }
    fn xs_write(&self, path: &str, value: &str) -> Result<(), BackendError> {
        self.xs.lock().unwrap().insert(path.into(), value.into());
        Ok(())
    }
}

/// The PV domain of the fake, and its p2m: pseudo-physical frame `p` is machine frame
/// `p2m(p)`, scattered over a larger machine; frame 7 has none.
const PV_DOM: u32 = 6;
const MACHINE_FRAMES: usize = 4096;
fn p2m(pfn: u64) -> Option<u64> {
    (pfn < 256 && pfn != 7).then_some((pfn * 37 + 11) % MACHINE_FRAMES as u64)
}

fn backend() -> XenBackend<FakeXen> {
    XenBackend::new(FakeXen::new())
}

#[test]
fn domains_cpu_time_and_keys() {
    let b = backend();
    let d = b.domains().unwrap();
    assert_eq!(d.len(), 4);
    assert_eq!(d[0].key, "3/00000000-0000-0000-0000-000000000003");
    assert_eq!(
        (d[0].name.as_str(), d[0].vcpus, d[0].ram_size),
        ("web", 2, 1 << 20)
    );
    assert_eq!(b.cpu_time_ns(&d[1].key).unwrap(), 28_000_000);
    // A reused domid with another UUID is another domain.
    assert!(matches!(
        b.cpu_time_ns("3/ffffffff-0000-0000-0000-000000000003"),
        Err(BackendError::NoDomain(_))
    ));
    assert!(matches!(
        b.cpu_time_ns("junk"),
        Err(BackendError::NoDomain(_))
    ));
}

#[test]
fn caps_by_the_domains_scheduler_and_exact_restore() {
    let b = backend();
    let d = b.domains().unwrap();
    let (web, db, rt) = (&d[0].key, &d[1].key, &d[2].key);
    assert_eq!(b.cap_mechanism(web), "xen credit cap");
    assert_eq!(b.cap_mechanism(db), "xen credit2 cap");
    let saved = b.save_cap(db).unwrap();
    b.set_cap(db, Some(12.6)).unwrap();
    assert_eq!(
        b.ops.sched_get(4, Scheduler::Credit2).unwrap(),
        SchedParams {
            weight: 512,
            cap: 13
        },
        "whole percent, the weight kept"
    );
    b.set_cap(db, None).unwrap();
    assert_eq!(b.ops.sched_get(4, Scheduler::Credit2).unwrap().cap, 0);
    b.set_cap(db, Some(0.2)).unwrap();
    assert_eq!(
        b.ops.sched_get(4, Scheduler::Credit2).unwrap().cap,
        1,
        "0 would mean none"
    );
    b.restore_cap(db, &saved).unwrap();
    assert_eq!(
        b.ops.sched_get(4, Scheduler::Credit2).unwrap(),
        SchedParams {
            weight: 512,
            cap: 50
        }
    );
    b.set_cap(web, Some(30.0)).unwrap();
    assert_eq!(b.ops.sched_get(3, Scheduler::Credit).unwrap().cap, 30);
    assert!(matches!(
        b.set_cap(web, Some(f64::NAN)),
        Err(BackendError::BadCap { pct }) if pct.is_nan()
    ));
    let e = b.set_cap(rt, Some(10.0)).unwrap_err().to_string();
    assert!(e.contains("credit or credit2"), "{e}");
    // A saved setting for another scheduler is refused, not misapplied.
    let wrong = serde_json::json!({"scheduler": "credit", "weight": 1, "cap": 1});
    assert!(matches!(
        b.restore_cap(db, &wrong),
        Err(BackendError::Saved(SavedError::Moved {
            from: Scheduler::Credit,
            to: Scheduler::Credit2
        }))
    ));
    assert!(matches!(
        b.restore_cap(db, &serde_json::json!({"x": 1})),
        Err(BackendError::Saved(SavedError::Xen { .. }))
    ));
}

#[test]
fn memory_is_mapped_in_batches_once_and_holes_are_errors() {
    let b = backend();
    let key = b.domains().unwrap()[0].key.clone();
    let m = b.memory(&key).unwrap();
    assert_eq!(m.size(), 1 << 20);
    // Across a page and a batch boundary (batch 0 ends at 64 x 4096).
    let at = GuestAddress(64 * 4096 - 3);
    m.write(at, b"abcdefgh").unwrap();
    let mut back = [0u8; 8];
    m.read(at, &mut back).unwrap();
    assert_eq!(&back, b"abcdefgh");
    let maps = b.ops.maps.load(Ordering::Relaxed);
    assert_eq!(maps, 2, "two batches");
    for _ in 0..100 {
        m.read(GuestAddress(5), &mut back).unwrap();
    }
    assert_eq!(b.ops.maps.load(Ordering::Relaxed), maps, "cached");
    assert!(
        Arc::ptr_eq(&m, &b.memory(&key).unwrap()),
        "one mapping per domain"
    );
    // The hole at gfn 100 and the end of RAM.
    let e = m.read(GuestAddress(100 * 4096 + 8), &mut back).unwrap_err();
    assert!(matches!(e, MemError::Unmapped { gfn: 100, .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "guest page 0x64 could not be mapped: xenforeignmemory_map: {}",
            std::io::Error::from_raw_os_error(libc::EFAULT)
        )
    );
    assert!(matches!(
        m.read(GuestAddress((1 << 20) - 4), &mut back),
        Err(MemError::OutOfRange { .. })
    ));
    assert!(m.read(GuestAddress(u64::MAX - 2), &mut back).is_err());
}

#[test]
fn the_channel_is_an_xsline_link_in_the_domains_data() {
    let b = backend();
    let key = b.domains().unwrap()[0].key.clone();
    let (mut r, mut w) = b.open_channel(&key).unwrap();
    w.write_all(b"{\"type\":\"hello\",\"version\":1}\n")
        .unwrap();
    let base = "/local/domain/3/data/resex/agent";
    let v = b.ops.xs_read(&format!("{base}/h2g")).unwrap().unwrap();
    assert!(v.ends_with(" 1 .{\"type\":\"hello\",\"version\":1}"), "{v}");
    // The guest's end, over the same xenstore.
    let store: Arc<dyn resex_proto::xsline::Store> = Arc::new(XsStore(b.ops.clone()));
    let (mut gr, mut gw) = resex_proto::xsline::open(
        store,
        base,
        resex_proto::xsline::Side::Guest,
        Duration::from_secs(10),
        4096,
    );
    let mut line = String::new();
    gr.read_line(&mut line).unwrap();
    assert_eq!(line, "{\"type\":\"hello\",\"version\":1}\n");
    gw.write_all(b"{\"type\":\"register\"}\n").unwrap();
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "{\"type\":\"register\"}\n");
}

#[test]
fn the_vf_is_the_first_network_vf_libxl_passed_through() {
    let t = crate::vf::sysfs::tests::tree();
    let b = XenBackend::new(FakeXen::new()).with_sysfs(t.path());
    let be = "/local/domain/0/backend/pci/3/0";
    // libxl's PCI backend for domain 3: a GPU VF, then a NIC VF.
    for (k, v) in [
        ("num_devs", "2"),
        ("dev-0", "0000:81:00.4"),
        ("dev-1", "0000:03:00.3"),
    ] {
        b.ops.xs_write(&format!("{be}/{k}"), v).unwrap();
    }
    let web = "3/00000000-0000-0000-0000-000000000003";
    let db = "4/00000000-0000-0000-0000-000000000004";
    assert_eq!(
        b.ops.pci_devices(3).unwrap(),
        ["0000:81:00.4", "0000:03:00.3"]
    );
    assert_eq!(
        b.vf(web).unwrap(),
        Some(crate::lever::Vf::Pci {
            addr: "0000:03:00.3".into()
        })
    );
    assert_eq!(b.vf(db).unwrap(), None, "no PCI backend: no VF");
    b.ops.xs_write(&format!("{be}/num_devs"), "lots").unwrap();
    let e = b.vf(web).unwrap_err();
    assert!(e.to_string().contains("not a count"), "{e}");
    assert!(
        matches!(&e, BackendError::Unparsable { text, expected: "a count", .. } if text == "lots"),
        "{e:?}"
    );
    assert!(matches!(
        b.vf("9/00000000-0000-0000-0000-000000000009"),
        Err(BackendError::NoDomain(_))
    ));
}

#[test]
fn a_pv_domains_pages_are_its_p2ms_machine_frames() {
    let b = backend();
    let key = "6/00000000-0000-0000-0000-000000000006";
    let m = b.memory(key).unwrap();
    // What the guest's agent registers is pseudo-physical: page 70 is machine frame p2m(70).
    m.write(GuestAddress(70 * 4096 + 12), b"pv page").unwrap();
    let mut back = [0u8; 7];
    m.read(GuestAddress(70 * 4096 + 12), &mut back).unwrap();
    assert_eq!(&back, b"pv page");
    let mfn = usize::try_from(p2m(70).unwrap()).unwrap();
    {
        let mem = b.ops.mem.lock().unwrap();
        let page = mem[&PV_DOM].pages[mfn].as_ref().unwrap();
        assert_eq!(&page[12..19], b"pv page", "written at the machine frame");
        assert!(mem[&PV_DOM].pages[70]
            .as_ref()
            .unwrap()
            .iter()
            .all(|&x| x == 0));
    }
    // A page with no machine frame is an error of its own; its batch's others still map.
    assert!(matches!(
        m.read(GuestAddress(7 * 4096), &mut back),
        Err(MemError::Unmapped { gfn: 7, .. })
    ));
    m.read(GuestAddress(8 * 4096), &mut back).unwrap();
    // An HVM domain's frames are not translated (the fake would panic).
    let hvm = b.memory("3/00000000-0000-0000-0000-000000000003").unwrap();
    hvm.read(GuestAddress(4096), &mut back).unwrap();
}
