//! The fleet over TLS against the real etcd: a CA and certificates made with the openssl
//! command, etcd serving https only and requiring client certificates. A member with the CA and
//! a client certificate joins and leads; without a client certificate, or trusting another CA,
//! it is refused in one clear line. Without etcd or openssl installed the test says so and
//! passes, unless RESEX_REQUIRE_SYSTEM_DEPS=1 (CI).

#![cfg(feature = "etcd")]

use resex_fleet::etcd::{unix_ms, Fleet, Member};
use resex_fleet::local::LocalEtcd;
use resex_fleet::{FleetConfig, HostRecord, HostSummary};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn openssl(dir: &Path, args: &[&str]) {
    let s = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        s.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&s.stderr)
    );
}

/// A CA named `name` and a certificate it signs for 127.0.0.1 (server and client use).
fn pki(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}-ca"),
            "-keyout",
            &format!("{name}-ca.key"),
            "-out",
            &format!("{name}-ca.pem"),
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    std::fs::write(
        dir.join(format!("{name}.ext")),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{name}-ca.pem"),
            "-CAkey",
            &format!("{name}-ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.pem"),
        ],
    );
}

fn have(bin: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn a_member_joins_over_tls_with_a_client_certificate_and_others_are_refused() {
    if !resex_fleet::local::installed() || !have("openssl") {
        assert!(
            std::env::var("RESEX_REQUIRE_SYSTEM_DEPS").as_deref() != Ok("1"),
            "etcd or openssl is not installed (apt-get install etcd-server openssl)"
        );
        eprintln!("etcd or openssl is not installed: skipped");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    pki(d.path(), "good");
    pki(d.path(), "other");
    let p = |f: &str| d.path().join(f);
    let e = LocalEtcd::start_tls(p("good.pem"), p("good.key"), p("good-ca.pem")).unwrap();
    assert!(e.url().starts_with("https://"));
    let cfg = FleetConfig {
        host: Some("secure".into()),
        ttl_s: 3,
        publish_ms: 200,
        ca_file: Some(p("good-ca.pem")),
        cert_file: Some(p("good.pem")),
        key_file: Some(p("good.key")),
        ..FleetConfig::new(vec![e.url()])
    };
    let record = HostRecord {
        host: "secure".into(),
        pid: std::process::id(),
        started_unix_ms: unix_ms(),
        metrics: None,
        backend: "local".into(),
        version: "test".into(),
    };
    let m = Member::start(cfg.clone(), record, || HostSummary {
        host: "secure".into(),
        at_unix_ms: unix_ms(),
        policy: "none".into(),
        link_util: 0.0,
        vms: vec![],
    })
    .unwrap();
    let t = Instant::now();
    while !m.state().leader {
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", m.state());
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = Fleet::connect(&cfg).unwrap().status().unwrap();
    assert_eq!(s.leader.as_deref(), Some("secure"));
    // No client certificate: etcd refuses the handshake; one line says where and why.
    let no_cert = FleetConfig {
        cert_file: None,
        key_file: None,
        ..cfg.clone()
    };
    let err = Fleet::connect(&no_cert).unwrap_err().to_string();
    assert!(
        err.contains("not reachable") && !err.contains('\n'),
        "{err}"
    );
    // Trusting another CA: the server's certificate is not believed.
    let wrong_ca = FleetConfig {
        ca_file: Some(p("other-ca.pem")),
        cert_file: Some(p("other.pem")),
        key_file: Some(p("other.key")),
        ..cfg.clone()
    };
    assert!(Fleet::connect(&wrong_ca).is_err());
    // Plain http to a TLS fleet is refused before any connection.
    let plain = FleetConfig {
        endpoints: vec![e.url().replace("https", "http")],
        ..cfg.clone()
    };
    assert!(Fleet::connect(&plain)
        .unwrap_err()
        .to_string()
        .contains("https"));
    // A missing file is named.
    let missing = FleetConfig {
        ca_file: Some(p("nope.pem")),
        ..cfg
    };
    assert!(Fleet::connect(&missing)
        .unwrap_err()
        .to_string()
        .contains("nope.pem"));
    m.leave();
}
