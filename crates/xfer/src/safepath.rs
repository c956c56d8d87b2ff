//! Confines every receiver-side file operation to the server root.
//!
//! Paths are walked one component at a time with openat(O_NOFOLLOW), so
//! neither `..` nor a symlink planted inside the root (even one swapped in
//! after a check) can redirect a write outside it.

use anyhow::{bail, Context, Result};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Longest file or directory name accepted: the part file and journal add
/// 14 bytes to it, and names are at most 255 bytes (NAME_MAX).
pub const MAX_NAME: usize = 240;

/// Splits a client-supplied relative path into checked components.
pub fn components(rel: &str) -> Result<Vec<String>> {
    if rel.is_empty() {
        bail!("empty path");
    }
    if rel.len() > 4096 || rel.contains('\0') {
        bail!("invalid path");
    }
    if rel.starts_with('/') {
        bail!("absolute path {rel:?} rejected: paths are relative to the server root");
    }
    let mut out = Vec::new();
    for c in rel.split('/') {
        match c {
            "" | "." => continue,
            ".." => bail!("path {rel:?} rejected: '..' is not allowed"),
            // Room for ".NAME.xfer-journal" within NAME_MAX (255).
            c if c.len() > MAX_NAME => {
                bail!("path {rel:?} rejected: a name is longer than {MAX_NAME} bytes")
            }
            _ => out.push(c.to_string()),
        }
    }
    if out.is_empty() {
        bail!("path {rel:?} names no file");
    }
    Ok(out)
}

fn cstr(s: &str) -> Result<CString> {
    CString::new(s).context("path contains NUL")
}

pub fn open_root(root: &std::path::Path) -> Result<OwnedFd> {
    let c = CString::new(root.as_os_str().as_encoded_bytes()).context("root path contains NUL")?;
    // SAFETY: c is a valid NUL-terminated string.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        bail!(
            "cannot open root {}: {}",
            root.display(),
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the parent directory of `rel` under `root` (creating missing
/// directories if `create`) and returns it with the final file name.
pub fn open_parent(root: &OwnedFd, rel: &str, create: bool) -> Result<(OwnedFd, String)> {
    walk(
        root,
        rel,
        if create {
            Walk::Create
        } else {
            Walk::MustExist
        },
    )
}

#[derive(PartialEq, Clone, Copy)]
enum Walk {
    /// Create missing directories (a destination of a send).
    Create,
    /// Directories must exist (a send into `DIR/`).
    MustExist,
    /// Directories must exist (the source of a pull).
    Read,
    /// Stop at the first missing directory (see `existing_ancestor`).
    Probe,
}

/// The deepest directory of `rel`'s parents that exists under `root`, and
/// how many components deep it is (the parent itself if that exists: depth
/// = components − 1). Nothing is created: a transfer can be checked against
/// the file system it would land on before any directory is made for it.
pub fn existing_ancestor(root: &OwnedFd, rel: &str) -> Result<(OwnedFd, usize)> {
    walk_dirs(root, rel, Walk::Probe)
}

/// Opens an existing regular file `rel` under `root` for reading (pulls),
/// with the same confinement as writes and no directories created.
pub fn open_read(root: &OwnedFd, rel: &str) -> Result<File> {
    let (dir, name) = walk(root, rel, Walk::Read)?;
    let f = match open_file(&dir, &name, libc::O_RDONLY | libc::O_NONBLOCK) {
        Err(e)
            if e.downcast_ref::<std::io::Error>().map(|e| e.kind())
                == Some(std::io::ErrorKind::NotFound) =>
        {
            bail!("{rel:?}: no such file under the server root")
        }
        r => r?,
    };
    if !f.metadata()?.is_file() {
        bail!("{rel:?} is not a regular file");
    }
    Ok(f)
}

fn walk(root: &OwnedFd, rel: &str, how: Walk) -> Result<(OwnedFd, String)> {
    let (dir, _) = walk_dirs(root, rel, how)?;
    let comps = components(rel)?;
    Ok((dir, comps.last().unwrap().clone()))
}

/// Opens the parent directories of `rel` one at a time; returns the last
/// one opened and how many were.
fn walk_dirs(root: &OwnedFd, rel: &str, how: Walk) -> Result<(OwnedFd, usize)> {
    let comps = components(rel)?;
    let dirs = &comps[..comps.len() - 1];
    // SAFETY: dup of a valid descriptor.
    let mut cur =
        unsafe { OwnedFd::from_raw_fd(libc::fcntl(root.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0)) };
    for (depth, d) in dirs.iter().enumerate() {
        let c = cstr(d)?;
        // SAFETY: valid dirfd and C string.
        if how == Walk::Create {
            unsafe { libc::mkdirat(cur.as_raw_fd(), c.as_ptr(), 0o755) };
        }
        let fd = unsafe {
            libc::openat(
                cur.as_raw_fd(),
                c.as_ptr(),
                libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
                    bail!("path {rel:?} rejected: {d:?} is a symlink or not a directory")
                }
                Some(libc::ENOENT) if how == Walk::Probe => return Ok((cur, depth)),
                Some(libc::ENOENT) if how == Walk::Read => {
                    bail!("{rel:?}: no such file under the server root")
                }
                Some(libc::ENOENT) if how == Walk::MustExist => {
                    bail!(
                        "{rel:?}: directory {d:?} does not exist under the server root \
                         (a DEST ending in '/' names an existing directory)"
                    )
                }
                _ => bail!("cannot open directory {d:?} of {rel:?}: {e}"),
            }
        }
        // SAFETY: fresh descriptor we own.
        cur = unsafe { OwnedFd::from_raw_fd(fd) };
    }
    Ok((cur, dirs.len()))
}

pub fn open_file(dir: &OwnedFd, name: &str, flags: i32) -> Result<File> {
    let c = cstr(name)?;
    // SAFETY: valid dirfd and C string.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ELOOP) {
            bail!("{name:?} is a symlink; refusing to follow it");
        }
        return Err(anyhow::Error::new(e).context(format!("opening {name:?}")));
    }
    // SAFETY: fresh descriptor we own.
    Ok(unsafe { File::from_raw_fd(fd) })
}

pub fn rename(dir: &OwnedFd, from: &str, to: &str) -> Result<()> {
    let (f, t) = (cstr(from)?, cstr(to)?);
    // SAFETY: valid dirfd and C strings.
    if unsafe { libc::renameat(dir.as_raw_fd(), f.as_ptr(), dir.as_raw_fd(), t.as_ptr()) } != 0 {
        bail!(
            "renaming {from:?} to {to:?}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

pub fn unlink(dir: &OwnedFd, name: &str) {
    if let Ok(c) = cstr(name) {
        // SAFETY: valid dirfd and C string.
        unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) };
    }
}

/// Refuses a destination that is an existing symlink or directory: renaming
/// over a symlink would be harmless, but it is almost certainly a mistake.
pub fn check_target(dir: &OwnedFd, name: &str) -> Result<()> {
    let c = cstr(name)?;
    // SAFETY: stat buffer is plain data, filled by the kernel.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        ) == 0
        {
            let t = st.st_mode & libc::S_IFMT;
            if t == libc::S_IFLNK {
                bail!("destination {name:?} is a symlink; refusing to write through it");
            }
            if t == libc::S_IFDIR {
                bail!("destination {name:?} is a directory: end DEST with '/' to send into it");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_traversal() {
        assert!(components("../x").is_err());
        assert!(components("a/../../x").is_err());
        assert!(components("/etc/passwd").is_err());
        assert!(components("").is_err());
        assert!(components("./").is_err());
        assert_eq!(components("a//b/./c").unwrap(), vec!["a", "b", "c"]);
        assert!(components(&"n".repeat(MAX_NAME)).is_ok());
        assert!(components(&"n".repeat(MAX_NAME + 1)).is_err());
    }

    #[test]
    fn rejects_symlink_escape() {
        let base = std::env::temp_dir().join(format!("xfer-safepath-{}", std::process::id()));
        let root = base.join("root");
        let outside = base.join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("f"), root.join("flink")).unwrap();
        let r = open_root(&root).unwrap();
        assert!(open_parent(&r, "link/f", true).is_err());
        let (d, n) = open_parent(&r, "flink", true).unwrap();
        assert!(check_target(&d, &n).is_err());
        assert!(open_file(&d, &n, libc::O_RDWR | libc::O_CREAT).is_err());
        let e = open_parent(&r, "new/f", false).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        assert_eq!(existing_ancestor(&r, "new/deeper/f").unwrap().1, 0);
        assert!(!root.join("new").exists());
        let (d, n) = open_parent(&r, "sub/dir/ok", true).unwrap();
        open_file(&d, &n, libc::O_RDWR | libc::O_CREAT).unwrap();
        assert!(root.join("sub/dir/ok").exists());
        // Reads: same confinement, nothing created, clear "missing" error.
        assert!(open_read(&r, "sub/dir/ok").is_ok());
        assert!(open_read(&r, "link/f").is_err());
        assert!(open_read(&r, "flink").is_err());
        assert!(open_read(&r, "sub").is_err());
        let e = open_read(&r, "new/missing").unwrap_err().to_string();
        assert!(e.contains("no such file"), "{e}");
        assert!(!root.join("new").exists());
        assert!(!outside.join("f").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
