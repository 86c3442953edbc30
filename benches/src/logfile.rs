//! The log files of the processes the harness starts: their last lines for error messages, and
//! trimming once a process has stopped, because the gateway's access log writes a line per
//! request (hundreds of MB per leg) and only the start and the end are worth keeping.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Bytes kept at each end of a trimmed log.
const KEEP: u64 = 64 * 1024;

/// The last `lines` lines of the file (reading at most its last 64 KiB).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = read_range(path, SeekFrom::End(-(KEEP as i64))).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Keeps the first and last 64 KiB of a larger file, with a line saying what was cut.
pub fn trim(path: &Path) -> std::io::Result<()> {
    let len = std::fs::metadata(path)?.len();
    if len <= 4 * KEEP {
        return Ok(());
    }
    let head = read_range(path, SeekFrom::Start(0))?;
    let tail = read_range(path, SeekFrom::End(-(KEEP as i64)))?;
    let head = head.rsplit_once('\n').map_or(head.as_str(), |(h, _)| h);
    let tail = tail.split_once('\n').map_or(tail.as_str(), |(_, t)| t);
    let mut file = File::create(path)?;
    writeln!(file, "{head}")?;
    writeln!(file, "[aisix-bench: {} bytes trimmed here]", len - 2 * KEEP)?;
    file.write_all(tail.as_bytes())
}

fn read_range(path: &Path, from: SeekFrom) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    if file.seek(from).is_err() {
        file.seek(SeekFrom::Start(0))?;
    }
    let mut bytes = Vec::new();
    file.take(KEEP).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_log_keeps_its_first_and_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("aisix.log");
        let text: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        trim(&path).unwrap();
        let trimmed = std::fs::read_to_string(&path).unwrap();
        assert!(trimmed.len() < 2 * KEEP as usize + 100);
        assert!(trimmed.starts_with("line 0\nline 1\n"));
        assert!(trimmed.contains("bytes trimmed here]\n"));
        assert!(trimmed.ends_with("line 99998\nline 99999\n"));
        assert_eq!(tail(&path, 2), "line 99998\nline 99999");
    }

    #[test]
    fn a_small_log_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("small.log");
        std::fs::write(&path, "one\ntwo\n").unwrap();
        trim(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo\n");
        assert_eq!(tail(&path, 1), "two");
    }
}
