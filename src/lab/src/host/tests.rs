use super::*;

const ONE: &str = r#"
name = "one"
[[guest]]
name = "v"
[guest.benchex]
buffer = "64KiB"
rate = 0
"#;

#[test]
fn refuses_a_periodic_job() {
    let plain = Scenario::from_toml(ONE).unwrap();
    assert!(check(&plain, &LabConfig::default()).is_ok());
    for keys in ["think_ms = 20.0", "think_ms = 20.0\nburst = 4"] {
        let text = ONE.replace("rate = 0", &format!("rate = 0\n{keys}"));
        let s = Scenario::from_toml(&text).unwrap();
        let e = check(&s, &LabConfig::default()).unwrap_err();
        assert!(
            matches!(&e, LabError::Periodic { guest } if guest == "v"),
            "{keys}: {e:?}"
        );
        assert!(
            e.to_string().starts_with(
                "guest v: a periodic job (benchex.think_ms, benchex.burst) runs on the \
                     embedded host only;"
            ),
            "{e}"
        );
    }
}
