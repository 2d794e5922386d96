//! Byte sizes as people write them: `65536`, `64K`, `64KiB`, `2M`, `2MiB`, `1G` (powers of 1024).

/// Parses a size; the error says what is accepted.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (examples: 4096, 64KiB, 2MiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        u => {
            return Err(format!(
                "unknown size unit `{u}` in `{s}` (use KiB, MiB or GiB)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
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
        assert!(parse_size("5 parsecs").unwrap_err().contains("unit"));
        assert!(parse_size("99999999999999G").is_err());
    }
}
