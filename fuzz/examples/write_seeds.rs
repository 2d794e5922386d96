//! Writes each fuzz target's seeds (made by the project's own writers, `resex_fuzz::seeds`)
//! into `fuzz/corpus/<target>/seed-<name>`. Run after changing a writer or a target's input
//! format: `cargo run -p resex-fuzz --example write_seeds`.

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (target, _) in resex_fuzz::TARGETS {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        let seeds = resex_fuzz::seeds::seeds(target);
        for (name, bytes) in &seeds {
            std::fs::write(dir.join(format!("seed-{name}")), bytes)?;
        }
        println!("{target}: {} seeds", seeds.len());
    }
    Ok(())
}
