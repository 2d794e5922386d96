//! A reliable stream of text lines over xenstore keys: how a Xen domU and dom0 carry the agent's
//! registration channel, the software HCA's control path and BenchEx's bootstrap (the twins of
//! KVM's virtio-serial ports), with nothing but a real Xen mechanism both ends already have.
//!
//! A link lives under one xenstore directory BASE (the domU's own, guest-writable
//! `/local/domain/ID/data/resex/NAME`; the domU says `data/resex/NAME`, relative to its home)
//! and has four keys: `h2g` and `g2h` carry messages, `h2g-ack` and `g2h-ack` their receipts.
//! A message is `EPOCH SEQ FLAG DATA`: EPOCH (hex) names one writer's session, SEQ counts its
//! messages from 1, FLAG is `+` when the line goes on in the next message and `.` when it ends
//! there, and DATA is at most [`CHUNK`] bytes of the line (xenstored's quota on a guest's node). A receipt is `EPOCH SEQ`. The writer
//! puts message N+1 only after the receipt of N (stop and wait: at most one message per
//! direction is ever stored, whatever the guest does); the reader takes a message whose EPOCH
//! and SEQ differ from the last receipt and writes its receipt. A reader that starts afresh
//! (resexd restarted) reads the receipt first, so a line it already took is not taken twice. A
//! new writer does not wait for the receipt of an old one's last message: that line is lost if
//! it was not read yet, and the protocols on top recover (a restarted resexd says `hello` and
//! the agent registers again).
//!
//! Both ends poll (1 ms, doubling to 20 ms while nothing changes): a line costs a few xenstore
//! round trips, and these channels carry a handful of lines per queue pair. Doorbells never
//! cross them: the HCA polls the guest's doorbell records in its memory.
//!
//! Everything read is hostile input: a value that does not parse is skipped once with an error,
//! a line over the reader's bound is dropped whole.

use std::io::{self, BufRead, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most bytes of a line in one message. xenstored refuses a guest's node of 2048 bytes or more
/// (its default `quota-maxsize`, counting the value, the permissions and the children's names:
/// `ENOSPC`), so a message keeps well under it.
pub const CHUNK: usize = 1024;
/// The line a relay sends first when a client connects to it (BenchEx's bootstrap in a domU
/// waits for it, as a virtio-serial port waits for its host end).
pub const CONNECT: &str = "{\"relay\":\"connect\"}";
/// The longest wait between two polls.
pub const MAX_POLL: Duration = Duration::from_millis(20);

/// What a link needs of xenstore: the host's libxenstore, the guest's `/dev/xen/xenbus`, or a
/// map in tests.
pub trait Store: Send + Sync {
    /// The value at `path`; `None` when there is none.
    fn read(&self, path: &str) -> io::Result<Option<String>>;
    /// Sets `path` to `value` (creating it and its parents).
    fn write(&self, path: &str, value: &str) -> io::Result<()>;
}

/// xenstore in memory: the two ends of a link in one process (tests, fakes).
#[derive(Debug, Default)]
pub struct MemStore(std::sync::Mutex<std::collections::HashMap<String, String>>);

impl MemStore {
    /// Keys with a value.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// No key has a value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Store for MemStore {
    fn read(&self, path: &str) -> io::Result<Option<String>> {
        Ok(self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(path)
            .cloned())
    }

    fn write(&self, path: &str, value: &str) -> io::Result<()> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(path.to_owned(), value.to_owned());
        Ok(())
    }
}

/// Which end of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// dom0: writes `h2g`, reads `g2h`.
    Host,
    /// The domU: writes `g2h`, reads `h2g`.
    Guest,
}

impl Side {
    fn keys(self) -> (&'static str, &'static str) {
        match self {
            Side::Host => ("h2g", "g2h"),
            Side::Guest => ("g2h", "h2g"),
        }
    }
}

/// Opens both directions of the link at `base` for `side`: (what the other end sends, what this
/// end sends). Reads and writes give up with `TimedOut` after `timeout` of silence; the reader
/// drops lines over `max_line` bytes.
pub fn open(
    store: Arc<dyn Store>,
    base: &str,
    side: Side,
    timeout: Duration,
    max_line: usize,
) -> (XsReader, XsWriter) {
    let (out, inn) = side.keys();
    let reader = XsReader {
        store: store.clone(),
        key: format!("{base}/{inn}"),
        ack: format!("{base}/{inn}-ack"),
        last: None,
        primed: false,
        partial: Vec::new(),
        dropping: false,
        pending: Vec::new(),
        pos: 0,
        timeout,
        max_line,
    };
    let writer = XsWriter {
        store,
        key: format!("{base}/{out}"),
        ack: format!("{base}/{out}-ack"),
        epoch: new_epoch(),
        seq: 0,
        buf: Vec::new(),
        timeout,
    };
    (reader, writer)
}

/// A writer session's name: distinct across the writers of one process and, by the clock and
/// the process id, from other processes' and earlier runs'.
fn new_epoch() -> u64 {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| (d.as_secs() << 30) ^ u64::from(d.subsec_nanos()));
    let mix = t ^ (u64::from(std::process::id()) << 40) ^ COUNT.fetch_add(1, Ordering::Relaxed);
    mix.max(1)
}

/// Parses a receipt `EPOCH SEQ`.
fn parse_ack(v: &str) -> Option<(u64, u64)> {
    let (e, s) = v.trim().split_once(' ')?;
    Some((u64::from_str_radix(e, 16).ok()?, s.parse().ok()?))
}

/// A message, parsed.
struct Message<'a> {
    epoch: u64,
    seq: u64,
    more: bool,
    data: &'a str,
}

fn parse_message(v: &str) -> Option<Message<'_>> {
    let (e, rest) = v.split_once(' ')?;
    let (s, rest) = rest.split_once(' ')?;
    let more = match rest.as_bytes().first()? {
        b'+' => true,
        b'.' => false,
        _ => return None,
    };
    Some(Message {
        epoch: u64::from_str_radix(e, 16).ok()?,
        seq: s.parse().ok()?,
        more,
        data: &rest[1..],
    })
}

/// Polls `f` until it gives a value, backing off from 1 ms to [`MAX_POLL`]; `TimedOut` after
/// `timeout`.
fn poll<T>(
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> io::Result<Option<T>>,
) -> io::Result<T> {
    let start = Instant::now();
    let mut wait = Duration::from_millis(1);
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        if start.elapsed() >= timeout {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("nothing from the other end at {what} for {timeout:?}"),
            ));
        }
        std::thread::sleep(wait);
        wait = (wait * 2).min(MAX_POLL);
    }
}

/// This end's sending half: whole lines go out when their newline is written.
pub struct XsWriter {
    store: Arc<dyn Store>,
    key: String,
    ack: String,
    epoch: u64,
    seq: u64,
    buf: Vec<u8>,
    timeout: Duration,
}

impl std::fmt::Debug for XsWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XsWriter")
            .field("key", &self.key)
            .field("seq", &self.seq)
            .finish()
    }
}

impl XsWriter {
    /// Sends one message after the receipt of the one before.
    fn send(&mut self, more: bool, data: &str) -> io::Result<()> {
        if self.seq > 0 {
            let want = (self.epoch, self.seq);
            let (store, ack) = (&self.store, &self.ack);
            poll(self.timeout, ack, || {
                Ok((store.read(ack)?.as_deref().and_then(parse_ack) == Some(want)).then_some(()))
            })?;
        }
        self.seq += 1;
        let flag = if more { '+' } else { '.' };
        let v = format!("{:x} {} {flag}{data}", self.epoch, self.seq);
        self.store.write(&self.key, &v)
    }

    /// Sends `line` (no newline) in messages of at most [`CHUNK`] bytes, cut between
    /// characters.
    fn send_line(&mut self, line: &str) -> io::Result<()> {
        let mut rest = line;
        loop {
            let mut cut = rest.len().min(CHUNK);
            while !rest.is_char_boundary(cut) {
                cut -= 1;
            }
            let (head, tail) = rest.split_at(cut);
            self.send(!tail.is_empty(), head)?;
            if tail.is_empty() {
                return Ok(());
            }
            rest = tail;
        }
    }
}

impl Write for XsWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=nl).collect();
            let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
            self.send_line(&text)?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// This end's receiving half: a `BufRead` of the other end's lines, each ending in `\n`.
pub struct XsReader {
    store: Arc<dyn Store>,
    key: String,
    ack: String,
    /// The last message taken (or found receipted when this reader started).
    last: Option<(u64, u64)>,
    primed: bool,
    /// The line's messages so far.
    partial: Vec<u8>,
    /// The rest of an over-long line is being skipped.
    dropping: bool,
    pending: Vec<u8>,
    pos: usize,
    timeout: Duration,
    max_line: usize,
}

impl std::fmt::Debug for XsReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XsReader")
            .field("key", &self.key)
            .field("last", &self.last)
            .finish()
    }
}

/// What one poll of the message key found.
enum Poll {
    Nothing,
    Line(Vec<u8>),
    Bad(String),
}

impl XsReader {
    /// Sets the reader's timeout (a session's first line may wait longer than the rest).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Takes the message at the key if it is new: a whole line when it ends one.
    fn take(&mut self) -> io::Result<Poll> {
        if !self.primed {
            self.last = self.store.read(&self.ack)?.as_deref().and_then(parse_ack);
            self.primed = true;
        }
        let Some(v) = self.store.read(&self.key)? else {
            return Ok(Poll::Nothing);
        };
        let Some(m) = parse_message(&v) else {
            // Not a message: a value the other end wrote by hand or a hostile one. It is taken
            // (so it is reported once) by remembering it under an impossible receipt.
            if self.last == Some((0, 0)) {
                return Ok(Poll::Nothing);
            }
            self.last = Some((0, 0));
            return Ok(Poll::Bad(format!(
                "{}: not a message: {:.64?}",
                self.key, v
            )));
        };
        if self.last == Some((m.epoch, m.seq)) {
            return Ok(Poll::Nothing);
        }
        if self.last.map(|l| l.0) != Some(m.epoch) {
            // A new writer: what an old one left half-sent is gone.
            self.partial.clear();
            self.dropping = false;
        }
        self.last = Some((m.epoch, m.seq));
        self.store
            .write(&self.ack, &format!("{:x} {}", m.epoch, m.seq))?;
        if self.dropping || self.partial.len() + m.data.len() > self.max_line {
            let first = !self.dropping;
            self.partial.clear();
            self.dropping = m.more;
            return Ok(if first {
                Poll::Bad(format!(
                    "{}: a line over {} bytes was dropped",
                    self.key, self.max_line
                ))
            } else {
                Poll::Nothing
            });
        }
        self.partial.extend_from_slice(m.data.as_bytes());
        if m.more {
            return Ok(Poll::Nothing);
        }
        let mut line = std::mem::take(&mut self.partial);
        line.push(b'\n');
        Ok(Poll::Line(line))
    }
}

impl BufRead for XsReader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.pos >= self.pending.len() {
            let (timeout, what) = (self.timeout, self.key.clone());
            let line = poll(timeout, &what, || match self.take()? {
                Poll::Nothing => Ok(None),
                Poll::Line(l) => Ok(Some(l)),
                Poll::Bad(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            })?;
            self.pending = line;
            self.pos = 0;
        }
        Ok(&self.pending[self.pos..])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.pending.len());
    }
}

impl Read for XsReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = {
            let avail = self.fill_buf()?;
            let n = avail.len().min(out.len());
            out[..n].copy_from_slice(&avail[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
