//! In a VM, as root: locks two pages with [`PinnedMemory`] (what `resex-agent --vm` registers
//! its rings in), writes TEXT at the start of each, prints their guest addresses from
//! `/proc/self/pagemap`, and holds them for SECS seconds (default 600). The host then reads
//! TEXT at those addresses (`resex xen peek DOMAIN ADDR --text` on Xen), which checks the
//! address a guest registers is the page the host maps: for a PV guest the addresses are
//! pseudo-physical and the host translates them through the guest's p2m.
//!
//! `pinned_probe TEXT [SECS]` prints `resex-probe: page N gpa=0x... text=TEXT-N`.

use resex_guestmem::{GuestAddress, GuestMemory, PinnedMemory};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let text = args.next().ok_or("usage: pinned_probe TEXT [SECS]")?;
    let secs: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(600);
    let mem = PinnedMemory::new(2 * 4096)?;
    for (i, gpa) in mem.pages().iter().enumerate() {
        let t = format!("{text}-{i}\0");
        mem.write(GuestAddress(i as u64 * 4096), t.as_bytes())?;
        println!("resex-probe: page {i} gpa={gpa:#x} text={text}-{i}");
    }
    std::thread::sleep(std::time::Duration::from_secs(secs));
    Ok(())
}
