//! Kubernetes quantities (`128Gi`, `64G`, `1.5Ti`, `512e6`) as whole numbers, for
//! comparing memory sizes. Pure.

/// The value of a quantity, rounded up to a whole unit (bytes, for memory). Refuses
/// negative values, fractions smaller than a unit, and anything that is not the
/// Kubernetes quantity grammar; the error says why.
pub fn parse_quantity(text: &str) -> Result<u128, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("is empty; use a quantity such as 128Gi".into());
    }
    let (number, suffix) = s.split_at(
        s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
            .unwrap_or(s.len()),
    );
    let number = number.strip_prefix('+').unwrap_or(number);
    if number.starts_with('-') {
        return Err(format!("{s:?} is negative"));
    }
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > 9
        || whole.len() > 18
    {
        return Err(format!(
            "{s:?} is not a quantity (a number with an optional suffix Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E)"
        ));
    }
    // value = whole.frac × multiplier, computed in integers scaled by 10^9.
    let scale = 1_000_000_000u128;
    let frac_scaled: u128 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().unwrap_or(0)
    };
    let mantissa = whole.parse::<u128>().unwrap_or(0) * scale + frac_scaled;
    let multiplier: u128 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        e if (e.starts_with('e') || e.starts_with('E')) && e.len() > 1 => {
            let exp: u32 = e[1..]
                .parse()
                .ok()
                .filter(|x| *x <= 18)
                .ok_or_else(|| format!("{s:?}: the exponent must be 0 to 18"))?;
            10u128.pow(exp)
        }
        other => {
            return Err(format!(
                "{s:?}: unknown suffix {other:?} (use Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P or E)"
            ));
        }
    };
    let scaled = mantissa * multiplier;
    Ok(scaled.div_ceil(scale))
}

/// Bytes as the shortest exact binary quantity (`128Gi`), for messages.
pub fn format_bytes(bytes: u128) -> String {
    for (suffix, shift) in [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ] {
        let unit = 1u128 << shift;
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_to_whole_units() {
        for (text, want) in [
            ("128Gi", 128u128 << 30),
            ("64G", 64_000_000_000),
            ("1.5Ti", 3u128 << 39),
            ("512e6", 512_000_000),
            ("1000", 1000),
            ("0.5Ki", 512),
            ("+2Mi", 2 << 20),
            ("1k", 1000),
            ("0.1", 1),
        ] {
            assert_eq!(parse_quantity(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_quantities_say_why() {
        for (text, why) in [
            ("", "empty"),
            ("-1Gi", "negative"),
            ("12GB", "unknown suffix \"GB\""),
            ("lots", "not a quantity"),
            ("1.2.3Gi", "not a quantity"),
            ("1e99", "exponent"),
        ] {
            let e = parse_quantity(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn bytes_format_as_the_shortest_binary_quantity() {
        assert_eq!(format_bytes(128 << 30), "128Gi");
        assert_eq!(format_bytes(1536 << 20), "1536Mi");
        assert_eq!(format_bytes(1000), "1000");
    }
}
