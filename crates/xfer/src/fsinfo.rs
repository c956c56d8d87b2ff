//! Facts about file systems that decide how a file is sent or received:
//! free space (statvfs), which mount a directory is on (for "no space left on
//! /data" rather than errno 28), and pseudo file systems whose files lie
//! about their size (procfs, sysfs, ...: statfs(2) magic numbers).

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Bytes an unprivileged writer may still allocate on the file system of
/// `dir` (f_bavail × f_frsize), or None if statvfs fails.
pub fn available(dir: &OwnedFd) -> Option<u64> {
    // SAFETY: statvfs is plain data, filled by the kernel.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::fstatvfs(dir.as_raw_fd(), &mut st) != 0 {
            return None;
        }
        Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
    }
}

/// Bytes allocated on disk to `name` in `dir` (st_blocks × 512), 0 if absent.
pub fn allocated(dir: &OwnedFd, name: &str) -> u64 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: stat buffer is plain data; valid dirfd and C string.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        ) != 0
        {
            return 0;
        }
        (st.st_blocks as u64).saturating_mul(512)
    }
}

/// True for errors that mean the file system (or the user's quota) is full.
pub fn is_no_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// The mount point of the file system holding `path` (an absolute,
/// canonical directory): the longest mount point in /proc/self/mountinfo
/// that is a prefix of `path` and has the same device. Falls back to `path`.
pub fn mount_point(path: &Path) -> PathBuf {
    let dev = match std::fs::metadata(path) {
        Ok(m) => std::os::unix::fs::MetadataExt::dev(&m),
        Err(_) => return path.to_path_buf(),
    };
    let (maj, min) = (libc::major(dev), libc::minor(dev));
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut best: Option<PathBuf> = None;
    for line in info.lines() {
        // mountinfo(5): id parent major:minor root mount-point options ...
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 5 || f[2] != format!("{maj}:{min}") {
            continue;
        }
        let mp = PathBuf::from(unescape(f[4]));
        if path.starts_with(&mp)
            && best
                .as_ref()
                .is_none_or(|b| mp.as_os_str().len() > b.as_os_str().len())
        {
            best = Some(mp);
        }
    }
    best.unwrap_or_else(|| path.to_path_buf())
}

/// mountinfo escapes space, tab, newline and backslash as \ooo.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// statfs(2) magic numbers of file systems whose regular files report a
/// size that is not their content's (0, or a page): procfs, sysfs, debugfs,
/// tracefs, securityfs, cgroup v1/v2, configfs, pstore, efivarfs, bpffs.
const PSEUDO_FS: [i64; 11] = [
    0x9fa0,
    0x6265_6572,
    0x6462_6720,
    0x7472_6163,
    0x7363_6673,
    0x0027_e0eb,
    0x6367_7270,
    0x6265_6570,
    0x6165_676c,
    0xde5e_81e4_u32 as i64,
    0xcafe_4a11,
];

/// True if `f` lives on a pseudo file system (see `PSEUDO_FS`).
pub fn is_pseudo(f: &File) -> bool {
    // SAFETY: statfs is plain data, filled by the kernel.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::fstatfs(f.as_raw_fd(), &mut st) == 0 && PSEUDO_FS.contains(&(st.f_type as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_is_pseudo_and_tmp_is_not() {
        assert!(is_pseudo(&File::open("/proc/self/status").unwrap()));
        let p = std::env::temp_dir().join(format!("xfer-fsinfo-{}", std::process::id()));
        std::fs::write(&p, b"x").unwrap();
        assert!(!is_pseudo(&File::open(&p).unwrap()));
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn mount_point_of_proc_and_root() {
        assert_eq!(mount_point(Path::new("/proc/self")), PathBuf::from("/proc"));
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/a\\"), "/a\\");
    }
}
