//! The demo's closing table: one line per phase, whether the story held, how the host held up.

use resex_demo::DemoReport;

/// Prints `r` as a table.
pub fn print(r: &DemoReport) {
    let lab = r.is_lab();
    println!(
        "\nphase         victim mean   victim p99   interferer Mb/s   interferer cap{}",
        if lab { "" } else { "   port CPU   host" }
    );
    for p in &r.phases {
        println!(
            "{:<12} {:>12} {:>12} {:>17.0} {:>16}{}",
            p.name,
            p.victim_mean_us.map_or("-".into(), |x| format!("{x:.1}us")),
            p.victim_p99_us.map_or("-".into(), |x| format!("{x:.1}us")),
            p.interferer_mbps,
            p.interferer_cap_mean
                .map_or("-".into(), |c| format!("{c:.0}%")),
            match &p.health {
                Some(h) => format!(
                    " {:>10}   {}",
                    h.hca_cpu_pct.map_or("-".into(), |c| format!("{c:.1}%")),
                    if h.host_overloaded {
                        "OVERLOADED"
                    } else {
                        "ok"
                    }
                ),
                None => String::new(),
            }
        );
    }
    if r.host_overloaded {
        println!(
            "story: not judged: the host was overloaded in some phase (above); run it on a \
             quieter machine, or `resex demo --lab` for the same phases in virtual time"
        );
    } else {
        println!("{}", r.story.line());
    }
    match (&r.host, r.seed) {
        (Some(h), _) => println!("{}", h.line()),
        (None, seed) => println!(
            "virtual time (seed {}): the same on any machine; `resex demo` runs it for real",
            seed.unwrap_or_default()
        ),
    }
}
