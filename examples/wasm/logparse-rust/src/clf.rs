//! A zero-copy parser of web access-log lines in the Common Log Format, optionally followed by the
//! Combined Log Format's extra fields:
//!
//! ```text
//! 203.0.113.7 - frank [10/Oct/2023:13:55:36 -0700] "GET /index.html HTTP/1.1" 200 2326
//! 203.0.113.7 - - [10/Oct/2023:13:55:37 -0700] "GET /a.png HTTP/1.1" 304 - "https://ref/" "agent"
//! ```
//!
//! The grammar, exactly (SP is one space byte):
//!
//! - `client SP ident SP user SP`: three non-empty runs of bytes other than SP;
//! - `[dd/Mon/yyyy:HH:MM:SS ±hhmm]`: day 01–31 valid for the month, `Mon` one of `Jan`…`Dec`,
//!   year 1970–9999, hour 00–23, minute and second 00–59, zone hours 00–23 and minutes 00–59;
//! - `SP "method SP target SP protocol"`: method 1–16 bytes `A`–`Z`, target and protocol non-empty
//!   runs of bytes other than SP; inside the quotes a backslash escapes the next byte (so `\"`
//!   does not end the request) and is kept as is in the target;
//! - `SP status`: three digits, 100–599;
//! - `SP size`: `-` (no body, 0 bytes) or 1–19 digits;
//! - then the end of the line, or SP followed by anything (referer, user agent, …).

/// One parsed line. Byte fields are views into the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access<'a> {
    /// The client field (usually an IP address).
    pub client: &'a [u8],
    /// The RFC 1413 identity, usually `-`.
    pub ident: &'a [u8],
    /// The authenticated user, or `-`.
    pub user: &'a [u8],
    /// The request time, ms since the Unix epoch (UTC).
    pub time_ms: i64,
    /// The request method, e.g. `GET`.
    pub method: &'a [u8],
    /// The request target, e.g. `/index.html?x=1`.
    pub target: &'a [u8],
    /// The protocol, e.g. `HTTP/1.1`.
    pub protocol: &'a [u8],
    /// The response status, 100–599.
    pub status: u16,
    /// The response size field as written: `-` or digits.
    pub size: &'a [u8],
    /// The response size in bytes (0 for `-`).
    pub bytes: u64,
}

/// Why a line is not an access-log line.
pub type Reason = &'static str;

/// Parses one line.
pub fn parse(line: &[u8]) -> Result<Access<'_>, Reason> {
    let mut c = Cursor { b: line, i: 0 };
    let client = c.field().ok_or("expected client, ident and user fields")?;
    let ident = c.field().ok_or("expected client, ident and user fields")?;
    let user = c.field().ok_or("expected client, ident and user fields")?;

    let stamp = c.take(28).ok_or("expected [dd/Mon/yyyy:HH:MM:SS +zzzz]")?;
    if stamp[0] != b'[' || stamp[27] != b']' {
        return Err("expected [dd/Mon/yyyy:HH:MM:SS +zzzz]");
    }
    let time_ms = parse_time(&stamp[1..27])?;

    if !c.eat(b' ') || !c.eat(b'"') {
        return Err("expected a quoted request after the time");
    }
    let request = c.quoted().ok_or("unterminated request")?;
    let (method, target, protocol) = split_request(request).ok_or("bad request line")?;

    if !c.eat(b' ') {
        return Err("expected the status after the request");
    }
    let status = c.take(3).and_then(digits).ok_or("bad status")?;
    if !(100..=599).contains(&status) {
        return Err("status out of range");
    }
    if !c.eat(b' ') {
        return Err("expected the size after the status");
    }
    let size = c.until_space();
    let bytes = if size == b"-" {
        0
    } else if !size.is_empty() && size.len() <= 19 {
        digits(size).ok_or("bad size")?
    } else {
        return Err("bad size");
    };
    if c.i < line.len() && !c.eat(b' ') {
        return Err("unexpected bytes after the size");
    }
    Ok(Access {
        client,
        ident,
        user,
        time_ms,
        method,
        target,
        protocol,
        status: status as u16,
        size,
        bytes,
    })
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn eat(&mut self, c: u8) -> bool {
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.i..self.i + n)?;
        self.i += n;
        Some(s)
    }

    fn until_space(&mut self) -> &'a [u8] {
        let start = self.i;
        while self.i < self.b.len() && self.b[self.i] != b' ' {
            self.i += 1;
        }
        &self.b[start..self.i]
    }

    /// A non-empty run of non-space bytes followed by one space.
    fn field(&mut self) -> Option<&'a [u8]> {
        let f = self.until_space();
        if f.is_empty() || !self.eat(b' ') {
            return None;
        }
        Some(f)
    }

    /// The bytes up to the closing quote (consumed); a backslash escapes the next byte.
    fn quoted(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        while self.i < self.b.len() {
            match self.b[self.i] {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Some(&self.b[start..self.i - 1]);
                }
                _ => self.i += 1,
            }
        }
        None
    }
}

/// `method SP target SP protocol`.
fn split_request(r: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let mut parts = r.split(|&c| c == b' ');
    let method = parts.next()?;
    let target = parts.next()?;
    let protocol = parts.next()?;
    if parts.next().is_some()
        || method.is_empty()
        || method.len() > 16
        || !method.iter().all(u8::is_ascii_uppercase)
        || target.is_empty()
        || protocol.is_empty()
    {
        return None;
    }
    Some((method, target, protocol))
}

/// Decimal digits only (no sign), at most 19 of them so the value fits.
fn digits(d: &[u8]) -> Option<u64> {
    if d.is_empty() || d.len() > 19 {
        return None;
    }
    let mut n = 0u64;
    for &c in d {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + (c - b'0') as u64;
    }
    Some(n)
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// `dd/Mon/yyyy:HH:MM:SS ±hhmm` (26 bytes) to ms since the epoch.
fn parse_time(t: &[u8]) -> Result<i64, Reason> {
    const BAD: Reason = "bad time";
    let sep = |i: usize, c: u8| t[i] == c;
    if !(sep(2, b'/')
        && sep(6, b'/')
        && sep(11, b':')
        && sep(14, b':')
        && sep(17, b':')
        && sep(20, b' '))
    {
        return Err(BAD);
    }
    let num = |a: usize, b: usize| digits(&t[a..b]).map(|n| n as i64).ok_or(BAD);
    let day = num(0, 2)?;
    let month = MONTHS
        .iter()
        .position(|m| t[3..6] == m[..])
        .ok_or("bad month")? as i64
        + 1;
    let year = num(7, 11)?;
    let (hour, min, sec) = (num(12, 14)?, num(15, 17)?, num(18, 20)?);
    let sign = match t[21] {
        b'+' => 1,
        b'-' => -1,
        _ => return Err(BAD),
    };
    let (zh, zm) = (num(22, 24)?, num(24, 26)?);
    if year < 1970
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || min > 59
        || sec > 59
        || zh > 23
        || zm > 59
    {
        return Err("time out of range");
    }
    let local = days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec;
    Ok((local - sign * (zh * 3600 + zm * 60)) * 1000)
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_and_combined() {
        let a = parse(b"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] \"GET /apache_pb.gif HTTP/1.0\" 200 2326").unwrap();
        assert_eq!(
            a,
            Access {
                client: b"127.0.0.1",
                ident: b"-",
                user: b"frank",
                time_ms: 971_211_336_000,
                method: b"GET",
                target: b"/apache_pb.gif",
                protocol: b"HTTP/1.0",
                status: 200,
                size: b"2326",
                bytes: 2326,
            }
        );
        let a = parse(
            br#"::1 - - [29/Feb/2024:00:00:00 +0000] "POST /a\"b HTTP/2.0" 503 - "-" "curl/8.0""#,
        )
        .unwrap();
        assert_eq!(
            (a.client, a.time_ms, a.method, a.target, a.status, a.bytes),
            (
                &b"::1"[..],
                1_709_164_800_000,
                &b"POST"[..],
                &br#"/a\"b"#[..],
                503,
                0
            )
        );
    }

    #[test]
    fn time_conversion() {
        let t = |s: &str| parse_time(s.as_bytes());
        assert_eq!(t("01/Jan/1970:00:00:00 +0000"), Ok(0));
        assert_eq!(t("01/Jan/1970:01:00:00 +0100"), Ok(0));
        assert_eq!(t("31/Dec/1969:23:00:00 -0100"), Err("time out of range"));
        assert_eq!(t("14/Nov/2023:22:13:20 +0000"), Ok(1_700_000_000_000));
        assert_eq!(t("15/Nov/2023:03:43:20 +0530"), Ok(1_700_000_000_000));
        assert_eq!(t("31/Dec/9999:23:59:59 +0000"), Ok(253_402_300_799_000));
        assert_eq!(t("29/Feb/2023:00:00:00 +0000"), Err("time out of range"));
        assert_eq!(t("29/Feb/2000:00:00:00 +0000"), Ok(951_782_400_000));
        assert_eq!(t("29/Feb/1900:00:00:00 +0000"), Err("time out of range"));
        assert_eq!(t("31/Apr/2023:00:00:00 +0000"), Err("time out of range"));
        assert_eq!(t("10/oct/2023:00:00:00 +0000"), Err("bad month"));
        assert_eq!(t("10/Oct/2023:24:00:00 +0000"), Err("time out of range"));
        assert_eq!(t("10/Oct/2023:00:00:00 0000"), Err("bad time"));
        assert_eq!(t("10/Oct/2023 00:00:00 +0000"), Err("bad time"));
        assert_eq!(t("1x/Oct/2023:00:00:00 +0000"), Err("bad time"));
    }

    #[test]
    fn rejects() {
        let cases: &[(&str, Reason)] = &[
            ("", "expected client, ident and user fields"),
            ("garbage", "expected client, ident and user fields"),
            ("a  b c [", "expected client, ident and user fields"),
            (
                "a b c 10/Oct/2023:13:55:36 +0000] \"GET / HTTP/1.1\" 200 1",
                "expected [dd/Mon/yyyy:HH:MM:SS +zzzz]",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000]\"GET / HTTP/1.1\" 200 1",
                "expected a quoted request after the time",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000] \"GET / HTTP/1.1 200 1",
                "unterminated request",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000] \"GET /  HTTP/1.1\" 200 1",
                "bad request line",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000] \"get / HTTP/1.1\" 200 1",
                "bad request line",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000] \"GET /\" 200 1",
                "bad request line",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000] \"-\" 408 -",
                "bad request line",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000] \"GET / HTTP/1.1\" 2x0 1",
                "bad status",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000] \"GET / HTTP/1.1\" 700 1",
                "status out of range",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000] \"GET / HTTP/1.1\" 099 1",
                "status out of range",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000] \"GET / HTTP/1.1\" 2000 1",
                "expected the size after the status",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000] \"GET / HTTP/1.1\" 200",
                "expected the size after the status",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000] \"GET / HTTP/1.1\" 200 ",
                "bad size",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000] \"GET / HTTP/1.1\" 200 12a",
                "bad size",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000] \"GET / HTTP/1.1\" 200 -1",
                "bad size",
            ),
            (
                "a b c [10/Oct/2023:13:55:36 +0000] \"GET / HTTP/1.1\" 200 99999999999999999999",
                "bad size",
            ),
        ];
        for (line, why) in cases {
            assert_eq!(parse(line.as_bytes()).err(), Some(*why), "{:?}", line);
        }
        // The largest 19-digit size fits.
        let a =
            parse(b"a b c [10/Oct/2023:13:55:36 +0000] \"GET / HTTP/1.1\" 200 9999999999999999999")
                .unwrap();
        assert_eq!(a.bytes, 9_999_999_999_999_999_999);
    }
}
