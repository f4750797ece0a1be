//! Durations in the syntax both Prometheus and CEL accept: one or more `<digits><unit>`
//! groups with units `ms`, `s`, `m`, `h` (e.g. `30s`, `1m30s`, `500ms`).

use std::time::Duration;

/// A string that is not such a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} {}", crate::messages::DURATION_FORMAT)]
pub struct ParseDurationError {
    /// The rejected input.
    pub input: String,
}

/// Parses `30s`, `1m30s`, `500ms`, `2h`.
pub fn parse(input: &str) -> Result<Duration, ParseDurationError> {
    let err = || ParseDurationError {
        input: input.to_owned(),
    };
    if input.is_empty() {
        return Err(err());
    }
    let mut total = Duration::ZERO;
    let mut rest = input;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(err());
        }
        let value: u64 = rest[..digits].parse().map_err(|_| err())?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (Duration::from_millis(1), 2)
        } else if rest.starts_with('s') {
            (Duration::from_secs(1), 1)
        } else if rest.starts_with('m') {
            (Duration::from_secs(60), 1)
        } else if rest.starts_with('h') {
            (Duration::from_secs(3600), 1)
        } else {
            return Err(err());
        };
        rest = &rest[len..];
        let part = unit
            .checked_mul(u32::try_from(value).map_err(|_| err())?)
            .ok_or_else(err)?;
        total = total.checked_add(part).ok_or_else(err)?;
    }
    Ok(total)
}

/// [`parse`] for a command-line flag (clap's `value_parser`): the error as text.
pub fn parse_flag(input: &str) -> Result<Duration, String> {
    parse(input).map_err(|e| e.to_string())
}

/// [`parse_flag`] for a flag that must be longer than 0.
pub fn parse_positive_flag(input: &str) -> Result<Duration, String> {
    let d = parse_flag(input)?;
    if d.is_zero() {
        return Err("must be longer than 0".to_owned());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_compound_units() {
        assert_eq!(parse("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(
            parse("1h1m1s1ms").unwrap(),
            Duration::from_millis(3_661_001)
        );
    }

    #[test]
    fn rejects_what_the_cel_rule_rejects() {
        for bad in ["", "30", "s", "1d", "1.5s", "-1s", "30 s", "1w", "m5"] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
