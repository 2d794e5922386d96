//! The demo's virtual-time run through the library: four phases in order, progress for each,
//! the report's shape, the interference visible.

use resex_demo::{Demo, DemoReport};

#[test]
fn the_lab_run_reports_four_phases_and_says_how_far_it_is() {
    let demo = Demo::new(8.0).unwrap();
    let mut seen: Vec<(usize, String, u64, u64)> = Vec::new();
    let r: DemoReport = resex_demo::lab::run(&demo, 1, &mut |k, name, done, total| {
        seen.push((k, name.to_owned(), done, total));
    })
    .unwrap();
    assert!(r.is_lab() && r.host.is_none() && r.seed == Some(1));
    assert_eq!(r.mode, "virtual-time");
    let names: Vec<&str> = r.phases.iter().map(|p| p.name).collect();
    assert_eq!(names, ["base", "interfered", "freemarket", "ioshares"]);
    // Progress comes phase by phase, in order, and never goes back within a phase.
    let mut phases: Vec<usize> = seen.iter().map(|s| s.0).collect();
    phases.dedup();
    assert_eq!(phases, [0, 1, 2, 3]);
    for w in seen.windows(2).filter(|w| w[0].0 == w[1].0) {
        assert!(w[1].2 >= w[0].2 && w[0].1 == names[w[0].0], "{w:?}");
    }
    assert!(r
        .phases
        .iter()
        .all(|p| p.health.is_none() && !p.host_overloaded));
    assert_eq!(r.phases[0].interferer_mbps, 0.0);
    assert!(r.phases[1].interferer_mbps > 1000.0, "{r:?}");
    assert!(r.story.interference_us.is_some(), "{r:?}");
}
