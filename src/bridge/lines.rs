//! The worker's stdout as newline-delimited messages, bounded: a line longer than the cap is never
//! held whole, and lines and bytes per second are counted against a rate.

use std::time::{Duration, Instant};

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// What the next read found.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// One line, without its `\n` (and a `\r` before it).
    Text(Vec<u8>),
    /// A line longer than the cap; what was read of it is dropped.
    TooLong,
    /// The stream ended (a last line without `\n` is still returned first).
    End,
}

/// Reads lines of at most `max` bytes from `reader`, into `buffer` (kept between calls, so a
/// line's allocation is reused).
pub async fn next_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buffer: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    buffer.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if buffer.is_empty() { Line::End } else { Line::Text(take(buffer)) });
        }
        let (chunk, found) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (&available[..at], Some(at + 1)),
            None => (available, None),
        };
        if buffer.len() + chunk.len() > max {
            buffer.clear();
            return Ok(Line::TooLong);
        }
        buffer.extend_from_slice(chunk);
        let used = found.unwrap_or(available.len());
        reader.consume(used);
        if found.is_some() {
            return Ok(Line::Text(take(buffer)));
        }
    }
}

fn take(buffer: &mut Vec<u8>) -> Vec<u8> {
    if buffer.last() == Some(&b'\r') {
        buffer.pop();
    }
    let line = buffer.clone();
    buffer.clear();
    line
}

/// Lines and bytes counted in windows of one second; past either cap in a window, a flood.
#[derive(Debug)]
pub struct Rate {
    max_lines: u32,
    max_bytes: u64,
    /// When the current window started (at the first line counted).
    window: Option<Instant>,
    lines: u32,
    bytes: u64,
}

/// Which cap a flood passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flood {
    Lines(u32),
    Bytes(u64),
}

impl std::fmt::Display for Flood {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Flood::Lines(n) => write!(f, "more than {n} lines in a second"),
            Flood::Bytes(n) => write!(f, "more than {n} bytes in a second"),
        }
    }
}

const WINDOW: Duration = Duration::from_secs(1);

impl Rate {
    pub fn new(max_lines: u32, max_bytes: u64) -> Rate {
        Rate { max_lines, max_bytes, window: None, lines: 0, bytes: 0 }
    }

    /// Counts one line of `len` bytes, read at `now`.
    pub fn count(&mut self, len: usize, now: Instant) -> Result<(), Flood> {
        if self.window.is_none_or(|start| now.duration_since(start) >= WINDOW) {
            (self.window, self.lines, self.bytes) = (Some(now), 0, 0);
        }
        self.lines += 1;
        self.bytes += len as u64 + 1;
        if self.lines > self.max_lines {
            return Err(Flood::Lines(self.max_lines));
        }
        if self.bytes > self.max_bytes {
            return Err(Flood::Bytes(self.max_bytes));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], capacity: usize, max: usize) -> Vec<Line> {
        let mut reader = tokio::io::BufReader::with_capacity(capacity, input);
        let (mut buffer, mut found) = (Vec::new(), Vec::new());
        loop {
            let line = next_line(&mut reader, &mut buffer, max).await.unwrap();
            let end = matches!(line, Line::End | Line::TooLong);
            found.push(line);
            if end {
                return found;
            }
        }
    }

    #[tokio::test]
    async fn lines_are_split_at_newlines_whatever_the_reads() {
        for capacity in [1, 3, 64] {
            let found = lines(b"{\"a\":1}\r\n\n{\"b\":2}\nlast", capacity, 16).await;
            let expected = [&b"{\"a\":1}"[..], b"", b"{\"b\":2}", b"last"].map(|l| Line::Text(l.to_vec()));
            assert_eq!(found[..4], expected, "capacity {capacity}");
            assert_eq!(found[4], Line::End);
        }
    }

    #[tokio::test]
    async fn a_line_past_the_cap_is_too_long_without_being_held() {
        for capacity in [1, 7, 4096] {
            let mut input = b"short\n".to_vec();
            input.extend(std::iter::repeat_n(b'x', 100));
            input.push(b'\n');
            let found = lines(&input, capacity, 32).await;
            assert_eq!(found, [Line::Text(b"short".to_vec()), Line::TooLong], "capacity {capacity}");
        }
        assert_eq!(lines(&[b'y'; 32], 8, 32).await, [Line::Text(vec![b'y'; 32]), Line::End], "at the cap");
    }

    #[test]
    fn a_flood_is_counted_per_second() {
        let start = Instant::now();
        let mut rate = Rate::new(3, 1000);
        for _ in 0..3 {
            rate.count(10, start).unwrap();
        }
        assert_eq!(rate.count(10, start), Err(Flood::Lines(3)));
        let mut rate = Rate::new(3, 1000);
        for second in 0..10 {
            for _ in 0..3 {
                rate.count(10, start + Duration::from_secs(second)).unwrap();
            }
        }
        let mut rate = Rate::new(100, 1000);
        rate.count(600, start).unwrap();
        assert_eq!(rate.count(600, start), Err(Flood::Bytes(1000)));
        rate.count(600, start + WINDOW).unwrap();
    }
}
