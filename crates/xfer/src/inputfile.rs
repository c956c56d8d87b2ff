//! Small files xfer reads its settings from (`--key-file`, `--rate-profile
//! @FILE`), and the paths it writes results to (`--json`, a pull's DEST).
//!
//! A settings file is opened without blocking (a FIFO with no writer would
//! otherwise hang the open), must be a regular file once open (a FIFO, a
//! device or a directory is refused by name: `/dev/zero` would never end), and
//! is read up to its limit. A key file must also be private, as ssh wants
//! of a private key: owned by this user (or root) and neither readable nor
//! writable by group or others, else anyone on the host could read the key, or
//! replace it with their own. A result path that exists must be a regular
//! file: a rename onto it would replace a device, a FIFO or a symlink (as root,
//! `/dev/null` itself).

use crate::limits::Limit;
use crate::util::usage;
use anyhow::{anyhow, Result};
use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// What a file is, in words, when it is not a regular file.
pub fn kind(md: &Metadata) -> &'static str {
    let t = md.file_type();
    match () {
        _ if t.is_dir() => "a directory",
        _ if t.is_fifo() => "a FIFO (named pipe)",
        _ if t.is_char_device() => "a character device",
        _ if t.is_block_device() => "a block device",
        _ if t.is_socket() => "a socket",
        _ if t.is_symlink() => "a symlink",
        _ => "a regular file",
    }
}

/// Opens `path` for reading without blocking and checks it is a regular
/// file (`what` names it in errors, e.g. "--key-file").
fn open_regular(what: &str, path: &Path) -> Result<(File, Metadata)> {
    let f = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| open_error(what, path, e))?;
    let md = f.metadata()?;
    if !md.is_file() {
        return Err(usage(format!(
            "{what} {} is {}, not a regular file",
            path.display(),
            kind(&md)
        )));
    }
    Ok((f, md))
}

/// A missing file is the user's input (exit status 2); a file they may
/// not read is the environment's (1).
fn open_error(what: &str, path: &Path, e: std::io::Error) -> anyhow::Error {
    // A socket cannot be opened at all (ENXIO): say what it is.
    let md = std::fs::metadata(path).ok();
    if let Some(md) = md.filter(|m| !m.is_file() && !m.is_dir()) {
        return usage(format!(
            "{what} {} is {}, not a regular file",
            path.display(),
            kind(&md)
        ));
    }
    let msg = format!("{what} {}: cannot read it: {e}", path.display());
    match e.kind() {
        std::io::ErrorKind::NotFound => usage(msg),
        _ => anyhow!(msg),
    }
}

/// The contents of a small regular file, at most `max` bytes.
pub fn read_small(what: &str, path: &Path, max: Limit<u64>) -> Result<Vec<u8>> {
    let (f, md) = open_regular(what, path)?;
    read_bounded(what, path, f, &md, max)
}

fn read_bounded(
    what: &str,
    path: &Path,
    f: File,
    md: &Metadata,
    max: Limit<u64>,
) -> Result<Vec<u8>> {
    let too_big = || {
        usage(format!(
            "{what} {} is larger than {} bytes ({})",
            path.display(),
            max.value,
            max.reason
        ))
    };
    if md.len() > max.value {
        return Err(too_big());
    }
    let mut buf = Vec::with_capacity(md.len() as usize);
    f.take(max.value + 1)
        .read_to_end(&mut buf)
        .map_err(|e| anyhow!("{what} {}: reading it: {e}", path.display()))?;
    if buf.len() as u64 > max.value {
        return Err(too_big());
    }
    Ok(buf)
}

/// A key file's contents, once it is found private (see the module's text).
pub fn read_key(path: &Path, max: Limit<u64>) -> Result<Vec<u8>> {
    let what = "--key-file";
    let (f, md) = open_regular(what, path)?;
    check_private(path, &md)?;
    read_bounded(what, path, f, &md, max)
}

fn check_private(path: &Path, md: &Metadata) -> Result<()> {
    // SAFETY: geteuid has no failure mode and touches no memory.
    let me = unsafe { libc::geteuid() };
    if md.uid() != me && md.uid() != 0 {
        return Err(usage(format!(
            "--key-file {} belongs to user {}, not to this user ({me}) or root: anyone who \
             owns it can change the key",
            path.display(),
            md.uid()
        )));
    }
    let mode = md.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(usage(format!(
            "--key-file {} is open to group or others (mode {mode:03o}): the key must be \
             private; chmod 600 {}",
            path.display(),
            path.display()
        )));
    }
    Ok(())
}

/// Checks a path results will be renamed onto: nothing there yet, or a
/// regular file (not a symlink, a device, a FIFO, a socket or a directory).
pub fn check_result_path(what: &str, path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(md) if md.is_file() => Ok(()),
        Ok(md) => Err(usage(format!(
            "{what} {} is {}, not a regular file: give the path of a file to write",
            path.display(),
            kind(&md)
        ))),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::UsageError;
    use std::os::unix::fs::PermissionsExt;

    const MAX: Limit<u64> = Limit {
        value: 64,
        reason: "test",
    };

    fn refused(r: Result<Vec<u8>>) -> String {
        let e = r.unwrap_err();
        assert!(e.downcast_ref::<UsageError>().is_some(), "{e}");
        e.to_string()
    }

    fn tmp(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("xfer-input-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_fifo_a_device_or_a_directory_is_refused_at_once() {
        let d = tmp("kinds");
        let fifo = d.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: c is a valid path string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer: a blocking open would never return.
        assert!(refused(read_small("--rate-profile", &fifo, MAX)).contains("is a FIFO"));
        assert!(refused(read_key(&fifo, MAX)).contains("is a FIFO"));
        let e = refused(read_small("x", Path::new("/dev/zero"), MAX));
        assert!(e.contains("/dev/zero is a character device"), "{e}");
        assert!(refused(read_small("x", &d, MAX)).contains("is a directory"));
        assert!(refused(read_small("x", &d.join("none"), MAX)).contains("cannot read"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_key_must_be_private_and_small() {
        let d = tmp("key");
        let k = d.join("key");
        std::fs::write(&k, "0123456789abcdef\n").unwrap();
        std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = refused(read_key(&k, MAX));
        assert!(e.contains("mode 644") && e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_key(&k, MAX).unwrap(), b"0123456789abcdef\n");
        // Through a symlink, the file it names is what is checked.
        let link = d.join("link");
        std::os::unix::fs::symlink(&k, &link).unwrap();
        assert!(read_key(&link, MAX).is_ok());
        std::fs::write(&k, [b'k'; 65]).unwrap();
        assert!(refused(read_key(&k, MAX)).contains("larger than 64 bytes"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn results_go_only_onto_regular_files() {
        let d = tmp("out");
        assert!(check_result_path("--json", &d.join("new.json")).is_ok());
        std::fs::write(d.join("old.json"), "{}").unwrap();
        assert!(check_result_path("--json", &d.join("old.json")).is_ok());
        let e = check_result_path("--json", Path::new("/dev/null")).unwrap_err();
        assert!(e.to_string().contains("is a character device"), "{e}");
        std::os::unix::fs::symlink(d.join("old.json"), d.join("l.json")).unwrap();
        let e = check_result_path("--json", &d.join("l.json")).unwrap_err();
        assert!(e.to_string().contains("is a symlink"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
