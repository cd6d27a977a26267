//! A packed plugin package (`npm pack`: a gzip tarball whose entries are under `package/`),
//! extracted into a private temporary directory within budgets (docs/cli.md, "sandcap import"):
//! the file is someone else's, and a tarball can claim any size, path or entry type.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

/// The most bytes of the tarball file (compressed).
pub const MAX_COMPRESSED: u64 = 16 * 1024 * 1024;
/// The most bytes it decompresses to (headers included).
pub const MAX_UNCOMPRESSED: u64 = 64 * 1024 * 1024;
/// The most entries (files and directories).
pub const MAX_ENTRIES: usize = 10_000;

/// What npm packs a package under.
const ROOT: &str = "package";

#[derive(Debug, thiserror::Error)]
pub enum TarballError {
    #[error("cannot read: {0}")]
    Read(#[from] io::Error),
    #[error("is larger than {MAX_COMPRESSED} bytes (a packed plugin package is far smaller)")]
    Compressed,
    #[error("decompresses to more than {MAX_UNCOMPRESSED} bytes")]
    Uncompressed,
    #[error("has more than {MAX_ENTRIES} entries")]
    Entries,
    #[error("is not a gzip tarball: {0}")]
    Format(String),
    #[error("entry {entry}: {problem}")]
    Entry { entry: String, problem: &'static str },
}

/// Counts what passes and fails the read past `limit`, saying so in `exceeded` (the tar reader
/// wraps the error in its own).
struct Limited<R> {
    inner: R,
    left: u64,
    exceeded: Rc<Cell<bool>>,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n as u64 > self.left {
            self.exceeded.set(true);
            return Err(io::Error::other("over the size budget"));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Extracts `path` into a new private directory: the package's directory (`package/`) inside
/// it. The directory goes when the returned [`tempfile::TempDir`] is dropped. The tarball is
/// read through once without writing anything, so that one over a budget or with an entry
/// refused leaves nothing behind (and costs no file system work), then again to extract it, under
/// the same checks (the file may have changed in between).
pub fn extract(path: &Path) -> Result<(tempfile::TempDir, PathBuf), TarballError> {
    let file = File::open(path)?;
    walk(&file, None)?;
    (&file).seek(SeekFrom::Start(0))?;
    let dir = tempfile::Builder::new().prefix("sandcap-import-").tempdir()?;
    let root = dir.path().join(ROOT);
    std::fs::create_dir(&root)?;
    walk(&file, Some(&root))?;
    Ok((dir, root))
}

/// Reads the tarball from the start, checking every budget and entry, and writes its files
/// under `root` when there is one.
fn walk(file: &File, root: Option<&Path>) -> Result<(), TarballError> {
    if file.metadata()?.len() > MAX_COMPRESSED {
        return Err(TarballError::Compressed);
    }
    let (compressed, uncompressed) = (Rc::new(Cell::new(false)), Rc::new(Cell::new(false)));
    // The file may grow after the check above: the read is bounded, not the check.
    let file = Limited { inner: file, left: MAX_COMPRESSED, exceeded: compressed.clone() };
    let gunzip = flate2::read::GzDecoder::new(file);
    let tar = Limited { inner: gunzip, left: MAX_UNCOMPRESSED, exceeded: uncompressed.clone() };
    let over = |e: io::Error| {
        if compressed.get() {
            TarballError::Compressed
        } else if uncompressed.get() {
            TarballError::Uncompressed
        } else {
            TarballError::Format(e.to_string())
        }
    };
    let mut archive = tar::Archive::new(tar);
    let mut entries = 0;
    for entry in archive.entries().map_err(over)? {
        let mut entry = entry.map_err(over)?;
        entries += 1;
        if entries > MAX_ENTRIES {
            return Err(TarballError::Entries);
        }
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let refuse = |problem| TarballError::Entry { entry: name.chars().take(256).collect(), problem };
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions() {
            continue;
        }
        let Some(relative) = inside(&entry.path().map_err(over)?) else {
            return Err(refuse("is not a relative path under package/ without '..'"));
        };
        let target = root.map(|r| r.join(&relative));
        if kind.is_dir() {
            if let Some(target) = target {
                std::fs::create_dir_all(&target)?;
            }
        } else if kind.is_file() {
            if entry.size() > MAX_UNCOMPRESSED {
                return Err(TarballError::Uncompressed);
            }
            write_file(&mut entry, target, &over)?;
        } else if kind.is_symlink() || kind.is_hard_link() {
            return Err(refuse("is a link (a package is regular files and directories)"));
        } else {
            return Err(refuse("is not a regular file or a directory"));
        }
    }
    Ok(())
}

/// Writes the file `entry` to `target`, or reads it through when there is none (`over` tells a
/// budget's refusal from a broken archive).
fn write_file(
    entry: &mut impl Read,
    target: Option<PathBuf>,
    over: &impl Fn(io::Error) -> TarballError,
) -> Result<(), TarballError> {
    let Some(target) = target else {
        io::copy(entry, &mut io::sink()).map_err(over)?;
        return Ok(());
    };
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // Written afresh with the process's default mode: no entry's mode, owner or time is kept, so
    // nothing extracted is executable or set-id.
    let mut out = File::create(&target)?;
    io::copy(entry, &mut out).map_err(over)?;
    Ok(())
}

/// The entry's path below `package/`, when it is a plain relative path there.
fn inside(path: &Path) -> Option<PathBuf> {
    let mut components = path.components().filter(|c| *c != Component::CurDir);
    if components.next() != Some(Component::Normal(ROOT.as_ref())) {
        return None;
    }
    let mut relative = PathBuf::new();
    for c in components {
        match c {
            Component::Normal(part) => relative.push(part),
            _ => return None,
        }
    }
    Some(relative)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_paths_under_package_are_inside() {
        assert_eq!(inside(Path::new("package/dist/m.js")), Some(PathBuf::from("dist/m.js")));
        assert_eq!(inside(Path::new("./package/./a")), Some(PathBuf::from("a")));
        assert_eq!(inside(Path::new("package")), Some(PathBuf::new()));
        assert_eq!(inside(Path::new("package/../x")), None);
        assert_eq!(inside(Path::new("/package/x")), None);
        assert_eq!(inside(Path::new("other/x")), None);
        assert_eq!(inside(Path::new("x")), None);
    }

    #[test]
    fn the_budget_is_counted_across_reads() {
        let exceeded = Rc::new(Cell::new(false));
        let mut limited = Limited { inner: &[0u8; 10][..], left: 6, exceeded: exceeded.clone() };
        let mut buf = [0u8; 4];
        assert_eq!(limited.read(&mut buf).unwrap(), 4);
        assert!(limited.read(&mut buf).is_err(), "4 + 4 is over 6");
        assert!(exceeded.get());
    }
}
