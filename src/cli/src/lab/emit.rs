//! Output shared by the lab's subcommands: pretty JSON or a table, a closed pipe no error.

use anyhow::Result;
use std::io::Write;

/// Prints `v` as pretty JSON, or through `table`; a closed pipe (`| head` had enough) is no
/// error.
pub fn emit<T: serde::Serialize>(
    json: bool,
    v: &T,
    table: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let written = if json {
        serde_json::to_writer_pretty(&mut out, v)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        table(&mut out)
    };
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}
