//! Validated values: the strict grammar every value must pass before it may reach a
//! device. Pure, no I/O.
//!
//! Each type here can only be built through its `parse` (or `new`) constructor, so a
//! backend that receives a [`crate::model::DesiredPort`] can render it into CLI text,
//! XML or OVSDB JSON without re-checking: no newline, command separator, comment
//! marker, CLI help trigger (`?`) or XML metacharacter can be inside. Errors are a
//! [`ValueError`] that says what is wrong in words a network engineer recognises; the
//! caller (the API validator) adds the field path.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Why a value was refused. The text never repeats the offending value verbatim
/// beyond a short, sanitised excerpt, so a hostile value cannot smuggle control
/// characters into logs or status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValueError(pub String);

impl ValueError {
    fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

/// A short, printable excerpt of untrusted input, for error messages: control and
/// non-ASCII characters are escaped and the result is cut at 40 characters.
pub fn excerpt(input: &str) -> String {
    let mut out = String::new();
    for (i, c) in input.chars().enumerate() {
        if i >= 40 {
            out.push('…');
            break;
        }
        if c.is_ascii_graphic() || c == ' ' {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    out
}

/// Lowest and highest usable 802.1Q VLAN id (0 and 4095 are reserved).
pub const VLAN_MIN: u16 = 1;
/// See [`VLAN_MIN`].
pub const VLAN_MAX: u16 = 4094;

/// An 802.1Q VLAN id, 1–4094.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u16", into = "u16")]
pub struct VlanId(u16);

impl VlanId {
    /// Accepts 1–4094.
    pub fn new(id: u16) -> Result<Self, ValueError> {
        if (VLAN_MIN..=VLAN_MAX).contains(&id) {
            Ok(Self(id))
        } else {
            Err(ValueError::new(format!(
                "VLAN {id} is outside 1-4094 (0 and 4095 are reserved)"
            )))
        }
    }

    /// Accepts any integer type; values that do not fit in 1–4094 are refused.
    pub fn from_i64(id: i64) -> Result<Self, ValueError> {
        match u16::try_from(id) {
            Ok(v) => Self::new(v),
            Err(_) => Err(ValueError::new(format!(
                "VLAN {id} is outside 1-4094 (0 and 4095 are reserved)"
            ))),
        }
    }

    /// The numeric id.
    pub fn get(self) -> u16 {
        self.0
    }
}

impl TryFrom<u16> for VlanId {
    type Error = ValueError;
    fn try_from(v: u16) -> Result<Self, ValueError> {
        Self::new(v)
    }
}

impl From<VlanId> for u16 {
    fn from(v: VlanId) -> u16 {
        v.0
    }
}

impl fmt::Display for VlanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A set of VLANs written the way switches print them: `"1, 6-10"`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VlanSet(BTreeSet<VlanId>);

impl VlanSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses the `vlanRange` grammar: comma-separated items, each `N` or `N-M` with
    /// 1 ≤ N ≤ M ≤ 4094; spaces around items and dashes are allowed; empty items,
    /// open ranges (`"1-"`) and reversed ranges (`"10-5"`) are refused.
    pub fn parse(input: &str) -> Result<Self, ValueError> {
        if input.len() > 512 {
            return Err(ValueError::new("VLAN range is longer than 512 characters"));
        }
        if let Some(c) = input
            .chars()
            .find(|c| !(c.is_ascii_digit() || *c == ',' || *c == '-' || *c == ' '))
        {
            return Err(ValueError::new(format!(
                "VLAN range may contain only digits, ',', '-' and spaces, found {:?}",
                excerpt(&c.to_string())
            )));
        }
        if input.trim().is_empty() {
            return Err(ValueError::new(
                "VLAN range is empty (leave the field out to allow every VLAN)",
            ));
        }
        let mut set = BTreeSet::new();
        for item in input.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(ValueError::new(format!(
                    "VLAN range {:?} has an empty item (a stray comma)",
                    excerpt(input)
                )));
            }
            let (lo, hi) = match item.split_once('-') {
                None => {
                    let v = parse_vlan_number(item)?;
                    (v, v)
                }
                Some((a, b)) => {
                    let (a, b) = (a.trim(), b.trim());
                    if a.is_empty() || b.is_empty() {
                        return Err(ValueError::new(format!(
                            "VLAN range item {item:?} is open-ended; write both ends, e.g. 6-10"
                        )));
                    }
                    let (lo, hi) = (parse_vlan_number(a)?, parse_vlan_number(b)?);
                    if lo > hi {
                        return Err(ValueError::new(format!(
                            "VLAN range item {item:?} is reversed; write {hi}-{lo}"
                        )));
                    }
                    (lo, hi)
                }
            };
            for v in lo.get()..=hi.get() {
                set.insert(VlanId(v));
            }
        }
        Ok(Self(set))
    }

    /// Adds one VLAN.
    pub fn insert(&mut self, vlan: VlanId) -> bool {
        self.0.insert(vlan)
    }

    /// Whether the VLAN is in the set.
    pub fn contains(&self, vlan: VlanId) -> bool {
        self.0.contains(&vlan)
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of VLANs in the set.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The VLANs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = VlanId> + '_ {
        self.0.iter().copied()
    }

    /// Compact form with ranges, as switches print it: `1,6-10`.
    pub fn to_range_string(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        let mut iter = self.0.iter().map(|v| v.get()).peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end = iter.next().unwrap_or(end);
            }
            if start == end {
                parts.push(start.to_string());
            } else {
                parts.push(format!("{start}-{end}"));
            }
        }
        parts.join(",")
    }
}

impl FromIterator<VlanId> for VlanSet {
    fn from_iter<T: IntoIterator<Item = VlanId>>(iter: T) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl fmt::Display for VlanSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_range_string())
    }
}

fn parse_vlan_number(s: &str) -> Result<VlanId, ValueError> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ValueError::new(format!(
            "{:?} is not a VLAN number (1-4094)",
            excerpt(s)
        )));
    }
    let n: u16 = s
        .parse()
        .map_err(|_| ValueError::new(format!("{:?} is not a VLAN number", excerpt(s))))?;
    VlanId::new(n)
}

/// Checks `input` against a character class and a length limit; the shared core of
/// the string grammars below.
fn check_chars(
    what: &str,
    input: &str,
    max_len: usize,
    allowed: impl Fn(char) -> bool,
    allowed_desc: &str,
) -> Result<(), ValueError> {
    if input.is_empty() {
        return Err(ValueError::new(format!("{what} is empty")));
    }
    let len = input.chars().count();
    if len > max_len {
        return Err(ValueError::new(format!(
            "{what} is {len} characters long; at most {max_len} are allowed"
        )));
    }
    if let Some(c) = input.chars().find(|c| !allowed(*c)) {
        return Err(ValueError::new(format!(
            "{what} contains {:?}; only {allowed_desc} are allowed",
            excerpt(&c.to_string())
        )));
    }
    Ok(())
}

macro_rules! string_value {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The validated text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = ValueError;
            fn from_str(s: &str) -> Result<Self, ValueError> {
                Self::parse(s)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::parse(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}

fn port_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | ':' | '-')
}

string_value!(
    /// A device port name as the device spells it: `FastEthernet0/1`,
    /// `Ethernet1`, `ethernet 1/g1`, `tengigabitethernet 0/0/1`, `ge-0/0/1`, `eth0`.
    /// Letters, digits, `/ . _ : -` and at most one single space between two words;
    /// it starts with a letter; at most 64 characters.
    PortName
);

impl PortName {
    /// Parses a device port name (see the type's documentation for the grammar).
    pub fn parse(input: &str) -> Result<Self, ValueError> {
        check_chars(
            "port name",
            input,
            64,
            |c| port_name_char(c) || c == ' ',
            "letters, digits, '/', '.', '_', ':', '-' and one inner space",
        )?;
        if !input.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Err(ValueError::new("port name must start with a letter"));
        }
        let words: Vec<&str> = input.split(' ').collect();
        if words.len() > 2 || words.iter().any(|w| w.is_empty()) {
            return Err(ValueError::new(
                "port name may contain at most one space, between two words",
            ));
        }
        Ok(Self(input.to_owned()))
    }
}

string_value!(
    /// A VLAN name: letters, digits, `_ . -`; 1–32 characters (the IOS limit).
    VlanName
);

impl VlanName {
    /// Parses a VLAN name.
    pub fn parse(input: &str) -> Result<Self, ValueError> {
        check_chars(
            "VLAN name",
            input,
            32,
            |c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'),
            "letters, digits, '_', '.' and '-'",
        )?;
        Ok(Self(input.to_owned()))
    }
}

string_value!(
    /// A port description: printable ASCII letters, digits, spaces and
    /// `_ . , : / @ ( ) + = -`; 1–80 characters; no leading or trailing space.
    /// Deliberately excludes `! # ; | ? $ & < > " ' \` and backquote: comment
    /// markers, command separators, the CLI help key and XML metacharacters.
    Description
);

impl Description {
    /// A description as a device reports it. One this grammar refuses (for example
    /// with a `#`) reads as a stand-in that differs from every desired description,
    /// so the port shows drift and the next apply overwrites it.
    pub fn read_from_device(text: &str) -> Self {
        Self::parse(text).unwrap_or_else(|_| Self("(description not readable by patchbay)".into()))
    }

    /// Parses a port description.
    pub fn parse(input: &str) -> Result<Self, ValueError> {
        check_chars(
            "description",
            input,
            80,
            |c| {
                c.is_ascii_alphanumeric()
                    || matches!(
                        c,
                        ' ' | '_' | '.' | ',' | ':' | '/' | '@' | '(' | ')' | '+' | '=' | '-'
                    )
            },
            "letters, digits, spaces and _ . , : / @ ( ) + = -",
        )?;
        if input.starts_with(' ') || input.ends_with(' ') {
            return Err(ValueError::new(
                "description must not start or end with a space",
            ));
        }
        Ok(Self(input.to_owned()))
    }
}

string_value!(
    /// An Open vSwitch bridge name: letters, digits, `_ . -`; 1–15 characters
    /// (the Linux interface-name limit).
    BridgeName
);

impl BridgeName {
    /// Parses a bridge name.
    pub fn parse(input: &str) -> Result<Self, ValueError> {
        check_chars(
            "bridge name",
            input,
            15,
            |c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'),
            "letters, digits, '_', '.' and '-'",
        )?;
        Ok(Self(input.to_owned()))
    }
}

string_value!(
    /// A device address: an IPv4/IPv6 address or a DNS host name; 1–253 characters.
    DeviceAddress
);

impl DeviceAddress {
    /// Parses a device address.
    pub fn parse(input: &str) -> Result<Self, ValueError> {
        check_chars(
            "address",
            input,
            253,
            |c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'),
            "letters, digits, '.', '-' and ':'",
        )?;
        if input.parse::<IpAddr>().is_ok() {
            return Ok(Self(input.to_owned()));
        }
        if input.contains(':') {
            return Err(ValueError::new(
                "address is neither an IP address nor a host name",
            ));
        }
        for label in input.split('.') {
            if label.is_empty()
                || label.len() > 63
                || label.starts_with('-')
                || label.ends_with('-')
            {
                return Err(ValueError::new(
                    "address is neither an IP address nor a valid host name",
                ));
            }
        }
        Ok(Self(input.to_owned()))
    }
}

/// An IP network in CIDR notation with the host bits clear: `10.0.0.0/8`,
/// `2001:db8::/32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `ADDRESS/PREFIX`. A bare address is refused (write `/32` or `/128`), and
    /// so are host bits set beyond the prefix (`10.0.0.1/8`), with the network the
    /// user probably meant in the message.
    pub fn parse(input: &str) -> Result<Self, ValueError> {
        check_chars(
            "CIDR",
            input,
            49,
            |c| c.is_ascii_hexdigit() || matches!(c, '.' | ':' | '/'),
            "hex digits, '.', ':' and '/'",
        )?;
        let Some((addr, prefix)) = input.split_once('/') else {
            return Err(ValueError::new(format!(
                "{:?} has no prefix length; write e.g. {}/32",
                excerpt(input),
                excerpt(input)
            )));
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| ValueError::new(format!("{:?} is not an IP address", excerpt(addr))))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = match prefix.parse() {
            Ok(p) if p <= max && !prefix.starts_with('+') => p,
            _ => {
                return Err(ValueError::new(format!(
                    "prefix length {:?} is not a number in 0-{max}",
                    excerpt(prefix)
                )));
            }
        };
        let network = mask(addr, prefix);
        if network != addr {
            return Err(ValueError::new(format!(
                "host bits are set in {}/{prefix}; did you mean {network}/{prefix}?",
                addr
            )));
        }
        Ok(Self { addr, prefix })
    }

    /// Whether this is an IPv4 network.
    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - prefix)
            };
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - prefix)
            };
            IpAddr::V6((bits & m).into())
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// A TCP/UDP port or port range: `22` or `22-30`, ports 1–65535, low ≤ high.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct L4PortRange {
    /// First port.
    pub low: u16,
    /// Last port (equal to `low` for a single port).
    pub high: u16,
}

impl L4PortRange {
    /// Parses `22` or `22-30`.
    pub fn parse(input: &str) -> Result<Self, ValueError> {
        check_chars(
            "port range",
            input,
            11,
            |c| c.is_ascii_digit() || c == '-',
            "digits and '-'",
        )?;
        let num = |s: &str| -> Result<u16, ValueError> {
            match s.parse::<u16>() {
                Ok(p) if p >= 1 && s.len() <= 5 => Ok(p),
                _ => Err(ValueError::new(format!(
                    "{:?} is not a port number in 1-65535",
                    excerpt(s)
                ))),
            }
        };
        match input.split_once('-') {
            None => {
                let p = num(input)?;
                Ok(Self { low: p, high: p })
            }
            Some((a, b)) => {
                if a.is_empty() || b.is_empty() {
                    return Err(ValueError::new(format!(
                        "port range {:?} is open-ended; write both ends, e.g. 22-30",
                        excerpt(input)
                    )));
                }
                let (low, high) = (num(a)?, num(b)?);
                if low > high {
                    return Err(ValueError::new(format!(
                        "port range {low}-{high} is reversed; write {high}-{low}"
                    )));
                }
                Ok(Self { low, high })
            }
        }
    }
}

impl fmt::Display for L4PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.low == self.high {
            write!(f, "{}", self.low)
        } else {
            write!(f, "{}-{}", self.low, self.high)
        }
    }
}

/// Smallest and largest accepted MTU (bytes of L3 payload): 576 (the IPv4 minimum
/// every router must accept) to 9216 (the usual jumbo-frame ceiling of switches).
pub const MTU_MIN: u32 = 576;
/// See [`MTU_MIN`].
pub const MTU_MAX: u32 = 9216;

/// A port MTU, 576–9216.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "i64", try_from = "i64")]
pub struct Mtu(u32);

impl Mtu {
    /// Accepts 576–9216.
    pub fn new(mtu: i64) -> Result<Self, ValueError> {
        if (i64::from(MTU_MIN)..=i64::from(MTU_MAX)).contains(&mtu) {
            Ok(Self(mtu as u32))
        } else {
            Err(ValueError::new(format!(
                "MTU {mtu} is outside {MTU_MIN}-{MTU_MAX}"
            )))
        }
    }

    /// The MTU in bytes.
    pub fn get(self) -> u32 {
        self.0
    }
}

/// Highest accepted link-aggregation group number (port-channel / LAG id).
pub const LAG_GROUP_MAX: u16 = 4096;

/// A link-aggregation group number, 1–4096.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "i64", try_from = "i64")]
pub struct LagGroup(u16);

impl LagGroup {
    /// Accepts 1–4096.
    pub fn new(group: i64) -> Result<Self, ValueError> {
        if (1..=i64::from(LAG_GROUP_MAX)).contains(&group) {
            Ok(Self(group as u16))
        } else {
            Err(ValueError::new(format!(
                "link-aggregation group {group} is outside 1-{LAG_GROUP_MAX}"
            )))
        }
    }

    /// The group number.
    pub fn get(self) -> u16 {
        self.0
    }
}

/// A MAC address, written `aa:bb:cc:dd:ee:ff` (either case on input, lower case out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct MacAddress([u8; 6]);

impl MacAddress {
    /// Parses six colon-separated hex pairs.
    pub fn parse(input: &str) -> Result<Self, ValueError> {
        let mut out = [0u8; 6];
        let mut parts = input.split(':');
        let bad = || {
            ValueError::new(format!(
                "{:?} is not a MAC address (six colon-separated hex pairs)",
                excerpt(input)
            ))
        };
        for b in &mut out {
            let p = parts.next().ok_or_else(bad)?;
            if p.len() != 2 || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Self(out))
    }

    /// The six bytes.
    pub fn octets(self) -> [u8; 6] {
        self.0
    }
}

impl fmt::Display for MacAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

macro_rules! serde_via {
    ($ty:ty, $repr:ty, $parse:expr, $to:expr) => {
        impl TryFrom<$repr> for $ty {
            type Error = ValueError;
            fn try_from(v: $repr) -> Result<Self, ValueError> {
                $parse(v)
            }
        }
        impl From<$ty> for $repr {
            fn from(v: $ty) -> $repr {
                $to(v)
            }
        }
    };
}

serde_via!(Cidr, String, |s: String| Cidr::parse(&s), |c: Cidr| c
    .to_string());
serde_via!(
    L4PortRange,
    String,
    |s: String| L4PortRange::parse(&s),
    |r: L4PortRange| r.to_string()
);
serde_via!(
    MacAddress,
    String,
    |s: String| MacAddress::parse(&s),
    |m: MacAddress| m.to_string()
);
serde_via!(Mtu, i64, Mtu::new, |m: Mtu| i64::from(m.0));
serde_via!(LagGroup, i64, LagGroup::new, |g: LagGroup| i64::from(g.0));

/// lldpd's control socket on the device, when not the default (`/run/lldpd.socket`):
/// an absolute path of letters, digits and `._-/`, nothing a shell would read as more
/// than one word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LldpSocket(String);

impl LldpSocket {
    /// Checks `path`; the error says why it was refused.
    pub fn parse(path: &str) -> Result<Self, String> {
        if !path.starts_with('/') {
            return Err("must be an absolute path".into());
        }
        if path.len() > 256 {
            return Err("must be at most 256 characters".into());
        }
        if let Some(c) = path
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')))
        {
            return Err(format!(
                "must not contain {c:?} (letters, digits, `._-/` only)"
            ));
        }
        if path.split('/').any(|part| part == "..") {
            return Err("must not contain `..`".into());
        }
        Ok(Self(path.to_owned()))
    }

    /// The path.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vlan_ids_outside_1_to_4094_are_refused() {
        for bad in [0u16, 4095, 5000, u16::MAX] {
            assert!(VlanId::new(bad).is_err(), "{bad} accepted");
        }
        for good in [1u16, 2, 100, 4094] {
            assert_eq!(VlanId::new(good).map(VlanId::get), Ok(good));
        }
        assert!(VlanId::from_i64(-1).is_err());
        assert!(VlanId::from_i64(70_000).is_err());
    }

    #[test]
    fn vlan_range_grammar() {
        let set = VlanSet::parse("1, 6-10").unwrap();
        assert_eq!(set.len(), 6);
        assert_eq!(set.to_range_string(), "1,6-10");
        assert_eq!(
            VlanSet::parse(" 5 - 7 ,9").unwrap().to_range_string(),
            "5-7,9"
        );
        assert_eq!(VlanSet::parse("1-4094").unwrap().len(), 4094);
        let refused = [
            ("1-", "open-ended"),
            ("-5", "open-ended"),
            ("10-5", "reversed"),
            ("0", "outside 1-4094"),
            ("4095", "outside 1-4094"),
            ("1,,2", "empty item"),
            ("1,", "empty item"),
            ("", "empty"),
            ("  ", "empty"),
            ("1;reload", "only digits"),
            ("1\n2", "only digits"),
            ("1-2-3", "not a VLAN number"),
            ("00001", "not a VLAN number"),
            ("abc", "only digits"),
        ];
        for (input, reason) in refused {
            let err = VlanSet::parse(input).expect_err(input);
            assert!(err.0.contains(reason), "{input:?}: {err}");
        }
    }

    #[test]
    fn port_names_follow_the_device_grammar() {
        for good in [
            "FastEthernet0/1",
            "Ethernet1",
            "ethernet 1/g1",
            "tengigabitethernet 0/0/1",
            "ge-0/0/1",
            "eth0",
            "Port-channel1",
        ] {
            assert!(PortName::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "0/1",
            "Gi0/1\nreload",
            "Gi0/1;reload",
            "Gi0/1 | include",
            "ethernet  1/g1",
            "ethernet 1/g1 ",
            "a b c",
            "Gi0/1!",
            "Gi0/1#",
            "Gi0/1?",
            "Gíga0/1",
        ] {
            assert!(PortName::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(PortName::parse(&"a".repeat(65)).is_err());
    }

    #[test]
    fn descriptions_refuse_cli_and_xml_metacharacters() {
        assert!(Description::parse("rack 12, server r12-s04 (eth0)").is_ok());
        for bad in [
            "x\ny", "x\r", "x;y", "x|y", "x!y", "x#y", "x?y", "x$y", "x&y", "x<y", "x>y", "x\"y",
            "x'y", "x\\y", "x`y", "\u{7}", "\u{0}", "é", " lead", "trail ", "",
        ] {
            assert!(Description::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(Description::parse(&"a".repeat(80)).is_ok());
        let err = Description::parse(&"a".repeat(300)).unwrap_err();
        assert!(err.0.contains("300 characters"), "{err}");
    }

    #[test]
    fn errors_do_not_echo_control_characters() {
        let err = Description::parse("ok\u{1b}[2J").unwrap_err();
        assert!(!err.0.contains('\u{1b}'), "{err:?}");
        assert!(err.0.contains("\\u{1b}"), "{err:?}");
    }

    #[test]
    fn cidrs() {
        assert_eq!(Cidr::parse("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
        assert!(Cidr::parse("2001:db8::/32").unwrap().prefix() == 32);
        assert!(Cidr::parse("0.0.0.0/0").is_ok());
        let e = Cidr::parse("10.0.0.1/8").unwrap_err();
        assert!(e.0.contains("did you mean 10.0.0.0/8"), "{e}");
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0/8",
            "256.0.0.0/8",
            "10.0.0.0/-1",
            "10.0.0.0/+8",
            "2001:db8::/129",
            "x/8",
            "10.0.0.0/8;",
            "",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn l4_port_ranges() {
        assert_eq!(L4PortRange::parse("22").unwrap().to_string(), "22");
        assert_eq!(L4PortRange::parse("22-30").unwrap().to_string(), "22-30");
        for bad in [
            "0", "65536", "30-22", "22-", "-22", "a", "22 30", "1-2-3", "",
        ] {
            assert!(L4PortRange::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn addresses_mtu_lag_bridges() {
        assert!(DeviceAddress::parse("127.0.0.1").is_ok());
        assert!(DeviceAddress::parse("::1").is_ok());
        assert!(DeviceAddress::parse("tor-1.rack12.example").is_ok());
        for bad in ["", "a b", "host;reboot", "-host", "a..b", "1:2:x"] {
            assert!(DeviceAddress::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(Mtu::new(1500).is_ok() && Mtu::new(9216).is_ok());
        assert!(Mtu::new(575).is_err() && Mtu::new(9217).is_err());
        assert!(LagGroup::new(0).is_err() && LagGroup::new(4097).is_err());
        assert!(BridgeName::parse("br-int").is_ok());
        assert!(BridgeName::parse("this-name-is-too-long").is_err());
    }
}
