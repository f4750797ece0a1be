//! Kubernetes resource quantities (`250m`, `1.5`, `4Gi`, `1e3`), read as a number in their
//! base unit: what the agent's capacity count and the end-to-end tests compare.

/// A Kubernetes quantity (`250m`, `1.5`, `4Gi`, `1e3`, `2k`) in its base unit, or `None`
/// when it does not parse.
pub fn parse(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    let value = number * factor;
    value.is_finite().then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_in_their_base_unit() {
        assert_eq!(parse("250m"), Some(0.25));
        assert_eq!(parse("2"), Some(2.0));
        assert_eq!(parse("1.5"), Some(1.5));
        assert_eq!(parse("4Gi"), Some(4.0 * 1024f64.powi(3)));
        assert_eq!(parse("2k"), Some(2000.0));
        assert_eq!(parse("1e3"), Some(1000.0));
        assert_eq!(parse("129M"), Some(129e6));
        assert_eq!(parse("12X"), None);
        assert_eq!(parse(""), None);
        assert_eq!(parse("m"), None);
    }
}
