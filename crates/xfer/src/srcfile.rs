//! A source file held to what it was when the transfer started.
//!
//! A regular file is sent as it stood at the first attempt's open: its
//! device, inode, size and modification time. Each attempt checks the open
//! file against them when its data is sent, and a retry checks the file it
//! opens again, so a file truncated, grown, rewritten or replaced while it is
//! sent fails the transfer ("the source changed during the transfer") and
//! nothing is committed. Such a failure is final: a retry would send another
//! file under the same name. A file that states no size (0 bytes when opened)
//! is read to its end like a pipe; on a real file system a size that then
//! appears means a writer is at work, and fails the transfer the same way,
//! rather than follow a growing file for ever.

use crate::util::human_bytes;
use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What to do instead, said with every refusal.
const ADVICE: &str = "nothing was committed: send a copy that does not change while it is \
                      sent (or pipe it, '-', to send a stream as read)";

/// A file's identity and contents' stamp.
#[derive(Clone, Debug, PartialEq)]
pub struct FileId {
    dev: u64,
    ino: u64,
    pub size: u64,
    mtime: Option<SystemTime>,
}

/// The source changed during the transfer (never retried).
#[derive(Debug)]
pub struct SourceChanged(pub String);

impl std::fmt::Display for SourceChanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SourceChanged {}

impl FileId {
    pub fn of(md: &Metadata) -> FileId {
        FileId {
            dev: md.dev(),
            ino: md.ino(),
            size: md.len(),
            mtime: md.modified().ok(),
        }
    }

    /// Ok if `now` is the file this transfer started with, unchanged.
    pub fn unchanged(&self, path: &Path, now: &Metadata) -> anyhow::Result<()> {
        let now = FileId::of(now);
        let what = if (now.dev, now.ino) != (self.dev, self.ino) {
            "it was replaced by another file".to_string()
        } else if now.size != self.size {
            format!(
                "it was {} ({} bytes) when the transfer started and is {} ({} bytes) now",
                human_bytes(self.size),
                self.size,
                human_bytes(now.size),
                now.size
            )
        } else if now.mtime != self.mtime {
            "it was written to (its modification time moved)".to_string()
        } else {
            return Ok(());
        };
        Err(changed(path, &what))
    }
}

fn changed(path: &Path, what: &str) -> anyhow::Error {
    anyhow::Error::new(SourceChanged(format!(
        "the source {} changed during the transfer: {what}; {ADVICE}",
        path.display()
    )))
}

/// An open source file and its identity, checked against the open file.
#[derive(Clone)]
pub struct Watched {
    pub file: std::sync::Arc<File>,
    pub path: PathBuf,
    pub id: FileId,
}

impl Watched {
    pub fn check(&self) -> anyhow::Result<()> {
        let md = self.file.metadata()?;
        self.id.unchanged(&self.path, &md)
    }
}

/// A file that stated 0 bytes, read to its end; fails once it states a size.
pub struct Unsized {
    file: File,
    path: PathBuf,
}

impl Unsized {
    pub fn new(file: File, path: &Path) -> Unsized {
        Unsized {
            file,
            path: path.to_path_buf(),
        }
    }
}

impl Read for Unsized {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        let stated = self.file.metadata()?.len();
        if stated > 0 {
            let what = format!(
                "it was empty when the transfer started and is {} ({stated} bytes) now",
                human_bytes(stated)
            );
            return Err(std::io::Error::other(
                changed(&self.path, &what).to_string(),
            ));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_that_changes_is_caught_and_says_how() {
        let p = std::env::temp_dir().join(format!("xfer-srcfile-{}", std::process::id()));
        std::fs::write(&p, vec![7u8; 8192]).unwrap();
        let f = File::open(&p).unwrap();
        let id = FileId::of(&f.metadata().unwrap());
        id.unchanged(&p, &f.metadata().unwrap()).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(4096)
            .unwrap();
        let e = id.unchanged(&p, &f.metadata().unwrap()).unwrap_err();
        assert!(e.downcast_ref::<SourceChanged>().is_some());
        let m = e.to_string();
        assert!(
            m.contains(
                "changed during the transfer: it was 8.00 KiB (8192 bytes) when the \
                        transfer started and is 4.00 KiB (4096 bytes) now; nothing was committed"
            ),
            "{m}"
        );
        // Same size, new contents: the modification time moves.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let id = FileId::of(&f.metadata().unwrap());
        std::fs::write(&p, vec![8u8; 4096]).unwrap();
        let e = id.unchanged(&p, &f.metadata().unwrap()).unwrap_err();
        assert!(e.to_string().contains("modification time moved"), "{e}");
        // Another file under the name.
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, vec![8u8; 4096]).unwrap();
        let e = id
            .unchanged(&p, &std::fs::metadata(&p).unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("replaced by another file"), "{e}");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn an_empty_file_that_starts_growing_is_caught() {
        let p = std::env::temp_dir().join(format!("xfer-unsized-{}", std::process::id()));
        std::fs::write(&p, b"").unwrap();
        let mut r = Unsized::new(File::open(&p).unwrap(), &p);
        let mut buf = Vec::new();
        assert_eq!(r.read_to_end(&mut buf).unwrap(), 0);
        let mut w = std::fs::File::options().append(true).open(&p).unwrap();
        w.write_all(b"more").unwrap();
        let e = r.read_to_end(&mut buf).unwrap_err();
        assert!(
            e.to_string()
                .contains("was empty when the transfer started"),
            "{e}"
        );
        std::fs::remove_file(&p).unwrap();
    }
}
