//! A streaming head-and-tail buffer with bounded memory.
//!
//! The first half of the capacity keeps the start of the stream, the second
//! half keeps its most recent bytes; everything in between is counted but
//! dropped, so a model sees how a command started, how it ended, and how much
//! it did not see.

use std::collections::VecDeque;

/// Keeps at most `capacity` bytes of a stream: its head and its tail.
#[derive(Debug, Clone)]
pub struct HeadTail {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl HeadTail {
    /// A buffer that retains at most `capacity` bytes (the head gets the odd
    /// byte).
    pub fn new(capacity: usize) -> Self {
        let tail_cap = capacity / 2;
        let head_cap = capacity - tail_cap;
        HeadTail {
            head_cap,
            tail_cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    /// Appends a chunk of the stream.
    pub fn push(&mut self, mut data: &[u8]) {
        self.total = self.total.saturating_add(data.len() as u64);
        let room = self.head_cap - self.head.len();
        if room > 0 {
            let take = room.min(data.len());
            self.head.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
        if data.is_empty() || self.tail_cap == 0 {
            return;
        }
        if data.len() >= self.tail_cap {
            self.tail.clear();
            self.tail
                .extend(data[data.len() - self.tail_cap..].iter().copied());
            return;
        }
        let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(data.iter().copied());
    }

    /// Bytes seen in total.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes kept (head plus tail); never more than the capacity.
    pub fn retained(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// Bytes dropped from the middle of the stream.
    pub fn omitted(&self) -> u64 {
        self.total - self.retained() as u64
    }

    /// The retained head.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// The retained tail, in stream order.
    pub fn tail(&self) -> Vec<u8> {
        self.tail.iter().copied().collect()
    }

    /// The text a model sees: the head, then (only if bytes were dropped) a
    /// marker line with the count, then the tail. Invalid UTF-8 is replaced.
    pub fn render(&self) -> String {
        let tail_bytes = self.tail();
        if self.omitted() == 0 {
            // Nothing dropped: decode as one stream, so a character split
            // between head and tail stays whole.
            let mut all = self.head.clone();
            all.extend_from_slice(&tail_bytes);
            return String::from_utf8_lossy(&all).into_owned();
        }
        let head = String::from_utf8_lossy(&self.head);
        let tail = String::from_utf8_lossy(&tail_bytes);
        format!("{head}\n[... {} bytes omitted ...]\n{tail}", self.omitted())
    }
}

#[cfg(test)]
mod tests {
    use super::HeadTail;

    struct Case {
        name: &'static str,
        capacity: usize,
        chunks: &'static [&'static str],
        head: &'static str,
        tail: &'static str,
        omitted: u64,
        rendered: &'static str,
    }

    const CASES: &[Case] = &[
        Case {
            name: "empty stream",
            capacity: 8,
            chunks: &[],
            head: "",
            tail: "",
            omitted: 0,
            rendered: "",
        },
        Case {
            name: "fits in the head",
            capacity: 8,
            chunks: &["abc"],
            head: "abc",
            tail: "",
            omitted: 0,
            rendered: "abc",
        },
        Case {
            name: "exactly the capacity, one chunk",
            capacity: 8,
            chunks: &["abcdefgh"],
            head: "abcd",
            tail: "efgh",
            omitted: 0,
            rendered: "abcdefgh",
        },
        Case {
            name: "exactly the capacity, many chunks",
            capacity: 8,
            chunks: &["ab", "cde", "f", "gh"],
            head: "abcd",
            tail: "efgh",
            omitted: 0,
            rendered: "abcdefgh",
        },
        Case {
            name: "one byte over",
            capacity: 8,
            chunks: &["abcdefghi"],
            head: "abcd",
            tail: "fghi",
            omitted: 1,
            rendered: "abcd\n[... 1 bytes omitted ...]\nfghi",
        },
        Case {
            name: "tail ring wraps over small chunks",
            capacity: 6,
            chunks: &["abc", "d", "e", "f", "g", "h", "ij"],
            head: "abc",
            tail: "hij",
            omitted: 4,
            rendered: "abc\n[... 4 bytes omitted ...]\nhij",
        },
        Case {
            name: "chunk larger than the whole capacity",
            capacity: 4,
            chunks: &["0123456789"],
            head: "01",
            tail: "89",
            omitted: 6,
            rendered: "01\n[... 6 bytes omitted ...]\n89",
        },
        Case {
            name: "odd capacity gives the head the extra byte",
            capacity: 5,
            chunks: &["abcdefg"],
            head: "abc",
            tail: "fg",
            omitted: 2,
            rendered: "abc\n[... 2 bytes omitted ...]\nfg",
        },
        Case {
            name: "capacity one keeps only the head byte",
            capacity: 1,
            chunks: &["xyz"],
            head: "x",
            tail: "",
            omitted: 2,
            rendered: "x\n[... 2 bytes omitted ...]\n",
        },
        Case {
            name: "capacity zero keeps nothing",
            capacity: 0,
            chunks: &["abc", "def"],
            head: "",
            tail: "",
            omitted: 6,
            rendered: "\n[... 6 bytes omitted ...]\n",
        },
        Case {
            name: "empty chunks change nothing",
            capacity: 4,
            chunks: &["", "ab", "", "cdef", ""],
            head: "ab",
            tail: "ef",
            omitted: 2,
            rendered: "ab\n[... 2 bytes omitted ...]\nef",
        },
    ];

    #[test]
    fn head_tail_table() {
        for case in CASES {
            let mut buf = HeadTail::new(case.capacity);
            for chunk in case.chunks {
                buf.push(chunk.as_bytes());
            }
            let total: usize = case.chunks.iter().map(|c| c.len()).sum();
            assert_eq!(buf.head(), case.head.as_bytes(), "{}: head", case.name);
            assert_eq!(buf.tail(), case.tail.as_bytes(), "{}: tail", case.name);
            assert_eq!(buf.omitted(), case.omitted, "{}: omitted", case.name);
            assert_eq!(buf.total(), total as u64, "{}: total", case.name);
            assert!(buf.retained() <= case.capacity, "{}: bound", case.name);
            assert_eq!(buf.render(), case.rendered, "{}: render", case.name);
        }
    }

    #[test]
    fn large_stream_stays_bounded() {
        let mut buf = HeadTail::new(1024);
        let chunk: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        for _ in 0..1000 {
            buf.push(&chunk);
        }
        assert_eq!(buf.retained(), 1024);
        assert_eq!(buf.total(), 4096 * 1000);
        assert_eq!(buf.omitted(), 4096 * 1000 - 1024);
        assert_eq!(buf.head(), &chunk[..512]);
        assert_eq!(buf.tail(), &chunk[4096 - 512..]);
    }

    #[test]
    fn a_character_across_head_and_tail_stays_whole() {
        // Capacity 4: head 2 bytes, tail 2. "aé!" is 4 bytes, é split 1+1.
        let mut buf = HeadTail::new(4);
        buf.push("aé!".as_bytes());
        assert_eq!(buf.omitted(), 0);
        assert_eq!(buf.render(), "aé!");
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let mut buf = HeadTail::new(16);
        buf.push(&[b'o', b'k', 0xff, b'!']);
        assert_eq!(buf.render(), "ok\u{fffd}!");
    }
}
