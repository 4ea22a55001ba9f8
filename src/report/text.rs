//! Text for the page: HTML escaping, numbers and durations as people read
//! them, and long texts cut with a note saying so.

/// `write!` into a `String`, which cannot fail.
macro_rules! w {
    ($out:expr, $($arg:tt)*) => {
        let _ = write!($out, $($arg)*);
    };
}
pub(crate) use w;

/// Escapes text for HTML content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `1234567` as `1,234,567`.
pub(crate) fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration: `4.2 s`, `3m 07s`, `2h 03m`.
pub(crate) fn seconds(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "—".into();
    }
    if s < 60.0 {
        return format!("{s:.1} s");
    }
    let total = s.round() as u64;
    if total < 3600 {
        format!("{}m {:02}s", total / 60, total % 60)
    } else {
        format!("{}h {:02}m", total / 3600, (total % 3600) / 60)
    }
}

/// `n` of `of` as a percentage, `—` of nothing.
pub(crate) fn percent(n: usize, of: usize) -> String {
    if of == 0 {
        "—".into()
    } else {
        format!("{:.1}%", n as f64 * 100.0 / of as f64)
    }
}

/// The largest char boundary at or below `at`.
pub(crate) fn boundary(s: &str, mut at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// `s` cut to `max` bytes, with a note saying how much was cut.
pub(crate) fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return esc(s);
    }
    let end = boundary(s, max);
    format!(
        "{}<span class=\"cut\">\n… cut: {} more bytes not shown</span>",
        esc(&s[..end]),
        s.len() - end
    )
}

/// `s` keeping its first `head` and last `tail` bytes, with a note.
pub(crate) fn cut_middle(s: &str, head: usize, tail: usize) -> String {
    if s.len() <= head + tail {
        return esc(s);
    }
    let a = boundary(s, head);
    let mut b = s.len() - tail;
    while !s.is_char_boundary(b) {
        b += 1;
    }
    format!(
        "{}<span class=\"cut\">\n… cut: {} bytes in the middle not shown …\n</span>{}",
        esc(&s[..a]),
        b - a,
        esc(&s[b..])
    )
}

/// `s` with every character but ASCII letters and digits as `-`, for ids.
pub(crate) fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(
            esc("<script>alert('x') & \"y\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;"
        );
    }

    #[test]
    fn cuts_keep_char_boundaries_and_say_so() {
        let s = "é".repeat(10);
        let c = cut(&s, 5);
        assert!(c.starts_with("éé<span"), "{c}");
        assert!(c.contains("16 more bytes"), "{c}");
        let m = cut_middle(&s, 3, 3);
        assert!(m.starts_with("é<span"), "{m}");
        assert!(
            m.ends_with("</span>é") && m.contains("16 bytes in the middle"),
            "{m}"
        );
        assert_eq!(cut("short", 100), "short");
    }

    #[test]
    fn numbers_and_durations_read_well() {
        for (n, want) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (1234567, "1,234,567"),
        ] {
            assert_eq!(thousands(n), want);
        }
        for (s, want) in [(4.24, "4.2 s"), (187.0, "3m 07s"), (7380.0, "2h 03m")] {
            assert_eq!(seconds(s), want);
        }
    }
}
