//! Byte sizes as people write them: `65536`, `64K`, `64KiB`, `2M`, `2MiB`, `1G` (powers of 1024).

/// A size that cannot be read; the message says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// No number in front.
    #[error("`{0}` is not a size (examples: 4096, 64KiB, 2MiB)")]
    NotASize(String),
    /// A unit that is not B, K(i)B, M(i)B or G(i)B.
    #[error("unknown size unit `{unit}` in `{size}` (use KiB, MiB or GiB)")]
    Unit {
        /// The unit given.
        unit: String,
        /// The whole size given.
        size: String,
    },
    /// Over 2^64 - 1 bytes.
    #[error("`{0}` is too large")]
    TooLarge(String),
}

/// Parses a size.
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| SizeError::NotASize(s.to_owned()))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        u => {
            return Err(SizeError::Unit {
                unit: u.to_owned(),
                size: s.to_owned(),
            })
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| SizeError::TooLarge(s.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn parses_what_people_write() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert_eq!(parse_size("1 GiB"), Ok(1 << 30));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5 parsecs")
            .unwrap_err()
            .to_string()
            .contains("unit"));
        assert!(parse_size("99999999999999G").is_err());
    }
}
