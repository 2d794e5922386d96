//! Target `channel`: the agent channel's framing (`resex_proto::channel::read_msg`) over a
//! byte stream from the input, in both directions: the host reading what a guest sends
//! (`GuestMsg`, whose registration then goes through validation as the registrar's does) and
//! the guest reading what the host sends (`HostMsg`).
//!
//! Input: byte 0 picks the direction and the reader's buffer size (1 to 64 bytes, so lines
//! arrive in pieces), byte 1 the line limit; the rest is the stream.
//!
//! Checked: nothing panics; every message read writes back as a line that reads back the same;
//! the reader stops at the end of the stream or at the first line over the limit.

use crate::input::Input;
use resex_ibmon::registry::{validate, Limits};
use resex_proto::channel::{read_msg, write_msg, GuestMsg, HostMsg, LineError, MAX_LINE};
use serde::{de::DeserializeOwned, Serialize};
use std::fmt::Debug;
use std::io::{BufRead, BufReader};

/// Line limits the target reads with.
pub const LIMITS: [usize; 4] = [16, 256, 4096, MAX_LINE];

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let a = input.u8();
    let max = LIMITS[usize::from(input.u8() % 4)];
    let stream = input.rest();
    let mut r = BufReader::with_capacity(1 + usize::from(a >> 1) % 64, stream);
    if a & 1 == 0 {
        read_all::<GuestMsg>(&mut r, max, stream.len(), |m| {
            let GuestMsg::Register { registration } = m;
            if registration.check_version().is_ok() {
                let _ = validate(registration, 1 << 30, &Limits::default());
            }
        });
    } else {
        read_all::<HostMsg>(&mut r, max, stream.len(), |_| {});
    }
}

fn read_all<T>(r: &mut dyn BufRead, max: usize, len: usize, mut each: impl FnMut(&T))
where
    T: DeserializeOwned + Serialize + PartialEq + Debug,
{
    // Every read consumes at least one byte or ends: at most len + 1 reads.
    for _ in 0..=len {
        match read_msg::<T>(r, max) {
            Ok(None) => return,
            Ok(Some(m)) => {
                let mut line = Vec::new();
                write_msg(&mut line, &m).expect("writing to memory");
                assert_eq!(line.last(), Some(&b'\n'));
                let back = read_msg::<T>(&mut &line[..], usize::MAX / 2);
                assert_eq!(
                    back.ok().flatten().as_ref(),
                    Some(&m),
                    "does not round-trip"
                );
                each(&m);
            }
            Err(LineError::Json(_)) => {}
            Err(LineError::TooLong(n)) => {
                assert_eq!(n, max);
                return;
            }
            Err(LineError::Io(e)) => panic!("reading memory failed: {e}"),
        }
    }
    panic!("read more messages than the stream has bytes");
}
