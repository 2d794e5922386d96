//! No import cycles between the files of a crate: if module `a` uses `crate::b` (or `super::b`,
//! `self::b`), then `b` must not use `a`, directly or through others. A module that needs
//! something of a module that needs it back takes it from a third, smaller one (an `error`,
//! `info` or `types` module), so each file can be read after the ones it uses.
//!
//! Read from the sources: every `crate::`, `super::` and `self::` path outside comments and
//! outside the file's `#[cfg(test)]` tail, resolved to the longest module path that is a file.
//! A parent declaring a child (`mod x;`, `pub use x::Y`) is not an edge: a child using its parent
//! is the common shape and is not a cycle by itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Every `.rs` file under `src`, as its module path (`lib.rs`, `main.rs` and `mod.rs` name
/// their directory's module).
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.insert(module_of(src, &p), p);
            }
        }
    }
    out
}

fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut m: Module = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    if matches!(m.last().map(String::as_str), Some("lib" | "main" | "mod")) {
        m.pop();
    }
    m
}

/// The file's code that counts: before its `#[cfg(test)]` tail, without `//` comments.
fn code(text: &str) -> String {
    let head = text.find("#[cfg(test)]").map_or(text, |i| &text[..i]);
    head.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths `crate::a::b`, `super::a`, `self::a` in `code`, as (anchor, segments).
fn paths(code: &str) -> Vec<(&str, Vec<&str>)> {
    let mut out = Vec::new();
    for anchor in ["crate", "super", "self"] {
        let pat = format!("{anchor}::");
        let mut from = 0;
        while let Some(i) = code[from..].find(&pat) {
            let at = from + i;
            from = at + pat.len();
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &code[from..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            let segs = rest[..end].split("::").filter(|s| !s.is_empty()).collect();
            out.push((anchor, segs));
        }
    }
    out
}

/// The module a path in `m`'s file (`is_dir_module`: a `lib.rs`/`mod.rs`) points into.
fn target(
    mods: &BTreeMap<Module, PathBuf>,
    m: &Module,
    is_dir_module: bool,
    anchor: &str,
    segs: &[&str],
) -> Option<Module> {
    let here: Module = if is_dir_module {
        m.clone()
    } else {
        m[..m.len().saturating_sub(1)].to_vec()
    };
    let base: Module = match anchor {
        "crate" => Vec::new(),
        "super" => here[..here.len().saturating_sub(1)].to_vec(),
        _ => here,
    };
    (0..=segs.len()).rev().find_map(|k| {
        let mut cand = base.clone();
        cand.extend(segs[..k].iter().map(|s| (*s).to_owned()));
        mods.contains_key(&cand).then_some(cand)
    })
}

fn edges(mods: &BTreeMap<Module, PathBuf>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut out: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, file) in mods {
        let text = std::fs::read_to_string(file).unwrap();
        let dir_module = matches!(
            file.file_stem().and_then(|s| s.to_str()),
            Some("lib" | "main" | "mod")
        );
        let set = out.entry(m.clone()).or_default();
        for (anchor, segs) in paths(&code(&text)) {
            if let Some(t) = target(mods, m, dir_module, anchor, &segs) {
                // A module and its own ancestors: the parent declares the child.
                if &t != m && !m.starts_with(&t) {
                    set.insert(t);
                }
            }
        }
    }
    out
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct T<'a> {
        g: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, (usize, usize)>,
        stack: Vec<&'a Module>,
        next: usize,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a Module) {
        t.index.insert(v, (t.next, t.next));
        t.next += 1;
        t.stack.push(v);
        for w in &t.g[v] {
            match t.index.get(w).copied() {
                None => {
                    visit(t, w);
                    let lw = t.index[w].1;
                    let e = t.index.get_mut(v).unwrap();
                    e.1 = e.1.min(lw);
                }
                Some((iw, _)) if t.stack.contains(&w) => {
                    let e = t.index.get_mut(v).unwrap();
                    e.1 = e.1.min(iw);
                }
                Some(_) => {}
            }
        }
        let (iv, lv) = t.index[v];
        if iv == lv {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn crate_cycles(src: &Path) -> Vec<String> {
    cycles(&edges(&modules(src)))
        .into_iter()
        .map(|c| {
            c.iter()
                .map(|m| {
                    if m.is_empty() {
                        "lib".into()
                    } else {
                        m.join("::")
                    }
                })
                .collect::<Vec<_>>()
                .join(" <-> ")
        })
        .collect()
}

fn workspace_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn no_crate_has_an_import_cycle_between_its_files() {
    let mut found = Vec::new();
    let mut crates = 0;
    for e in std::fs::read_dir(workspace_src()).unwrap().flatten() {
        let src = e.path().join("src");
        if !src.is_dir() {
            continue;
        }
        crates += 1;
        for c in crate_cycles(&src) {
            found.push(format!("{}: {c}", e.file_name().to_string_lossy()));
        }
    }
    assert!(crates > 20, "read {crates} crates only");
    found.sort();
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn the_checker_sees_a_cycle_and_ignores_comments_tests_and_parents() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("c")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a; mod b; mod c;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::X;\n").unwrap();
    std::fs::write(src.join("b.rs"), "use super::a::Y; // crate::c::Z\n").unwrap();
    std::fs::write(
        src.join("c/mod.rs"),
        "pub use self::d::W;\n#[cfg(test)]\nmod t { use crate::a::Q; }\n",
    )
    .unwrap();
    std::fs::write(src.join("c/d.rs"), "use super::W2; use crate::a;\n").unwrap();
    assert_eq!(crate_cycles(src), vec!["a <-> b".to_owned()]);
}
