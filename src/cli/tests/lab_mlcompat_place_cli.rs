//! `resex lab mlcompat place` end to end: the example's preset jobs placed on its links (every
//! job once, no link over its room, the worst link no worse than round-robin's), and a file
//! naming an unknown preset refused with the known ones listed.

mod common;

use common::{resex, stdout};

#[test]
fn the_example_is_placed_no_worse_than_round_robin() {
    let file = "tools/scenarios/mlcompat/place.toml";
    let out = stdout(&resex(&["lab", "mlcompat", "place", file, "--json"]));
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    let text = std::fs::read_to_string(common::root().join(file)).unwrap();
    let spec: toml::Value = toml::from_str(&text).unwrap();
    let mut want: Vec<&str> = spec["job"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    want.sort_unstable();
    let links = p["links"].as_array().unwrap();
    assert_eq!(links.len(), spec["link"].as_array().unwrap().len(), "{p}");
    let mut placed: Vec<&str> = Vec::new();
    for (l, s) in links.iter().zip(spec["link"].as_array().unwrap()) {
        assert_eq!(l["link"].as_str(), s["name"].as_str(), "{p}");
        let jobs = l["jobs"].as_array().unwrap();
        assert!(
            jobs.len() as i64 <= s["max_jobs"].as_integer().unwrap(),
            "{l}"
        );
        placed.extend(jobs.iter().map(|j| j.as_str().unwrap()));
        let score = l["score"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&score), "{l}");
    }
    placed.sort_unstable();
    assert_eq!(placed, want, "every job placed once: {p}");
    let (worst, base_worst) = (
        p["worst_score"].as_f64().unwrap(),
        p["baseline"]["worst_score"].as_f64().unwrap(),
    );
    assert!(worst >= base_worst, "{p}");
    // The example is drawn so that the advice matters.
    let (mean, base_mean) = (
        p["mean_score"].as_f64().unwrap(),
        p["baseline"]["mean_score"].as_f64().unwrap(),
    );
    assert!(worst > base_worst + 0.01 && mean > base_mean, "{p}");
    // The text form: one line per link, then the comparison.
    let out = stdout(&resex(&["lab", "mlcompat", "place", file]));
    assert_eq!(out.lines().count(), links.len() + 1, "{out}");
    assert!(out.contains("baseline"), "{out}");
}

#[test]
fn an_unknown_preset_names_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "[[job]]\nname = \"x\"\npreset = \"alexnet\"\n[[link]]\nname = \"l\"\nmax_jobs = 1\n",
    )
    .unwrap();
    let o = resex(&["lab", "mlcompat", "place", file.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("alexnet") && err.contains("vgg19"), "{err}");
    // Too many jobs for the links' room: the library's error, not a panic.
    std::fs::write(
        &file,
        "[[job]]\nname = \"a\"\npreset = \"bert\"\n[[job]]\nname = \"b\"\npreset = \"bert\"\n\
         [[link]]\nname = \"l\"\nmax_jobs = 1\n",
    )
    .unwrap();
    let o = resex(&["lab", "mlcompat", "place", file.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("room for 1"), "{err}");
}
