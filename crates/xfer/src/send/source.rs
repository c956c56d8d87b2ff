//! What a sender sends: SRC opened for an attempt (a file of trusted size
//! read by offset, `mem:`, or a pipe read to its end), and the shared source
//! stream-mode senders take their chunks from.

use crate::fsinfo;
use crate::inputfile;
use crate::session::{SendOpts, SrcSpec};
use crate::srcfile::{self, FileId, Watched};
use crate::util::usage;
use anyhow::{anyhow, bail, Context, Result};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// What one attempt needs from the source.
pub(crate) enum Source {
    /// A regular file whose size can be trusted: read by offset, resumable;
    /// held to what it was when the transfer started (srcfile.rs).
    File(Watched),
    Mem {
        size: u64,
    },
    Pipe {
        reader: Box<dyn Read + Send>,
        child: Option<Child>,
    },
}

/// Opens SRC for one attempt; `first`: the source file as the first attempt
/// found it (a retry must find it unchanged).
pub(crate) fn open_source(o: &SendOpts, first: &mut Option<FileId>) -> Result<Source> {
    Ok(match &o.src {
        SrcSpec::Path(p) => open_path(o, p, first)?,
        SrcSpec::Stdin => Source::Pipe {
            reader: Box::new(std::io::stdin()),
            child: None,
        },
        SrcSpec::Mem(n) => Source::Mem { size: *n },
        SrcSpec::Pull(_) => bail!("internal error: a pull has no local source"),
        SrcSpec::Cmd(c) => {
            let mut ch = Command::new("sh")
                .arg("-c")
                .arg(c)
                .stdout(Stdio::piped())
                .stdin(Stdio::null())
                .spawn()
                .with_context(|| format!("starting producer {c:?}"))?;
            Source::Pipe {
                reader: Box::new(ch.stdout.take().unwrap()),
                child: Some(ch),
            }
        }
    })
}

/// SRC as a path: a regular file of trusted size (held to what the first
/// attempt found, see srcfile.rs), or anything else read to its end like a
/// pipe: a file that states no size (procfs, sysfs, an empty file), a FIFO,
/// a device. A directory or a socket is refused.
fn open_path(o: &SendOpts, p: &std::path::Path, first: &mut Option<FileId>) -> Result<Source> {
    let md = std::fs::metadata(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => usage(format!("SRC {}: no such file", p.display())),
        _ => anyhow!("SRC {}: {e}", p.display()),
    })?;
    let t = md.file_type();
    if t.is_dir() {
        return Err(usage(format!(
            "SRC {} is a directory (send it as a pipe: --from-cmd \"tar cf - DIR\")",
            p.display()
        )));
    }
    if std::os::unix::fs::FileTypeExt::is_socket(&t) {
        return Err(usage(format!(
            "SRC {} is a socket, not a file",
            p.display()
        )));
    }
    if !md.is_file() && !o.quiet {
        eprintln!(
            "xfer: SRC {} is {}: sending what it gives until its end, in stream mode",
            p.display(),
            inputfile::kind(&md)
        );
    }
    let f = File::open(p).with_context(|| format!("opening {}", p.display()))?;
    let md = f.metadata()?;
    let pseudo = fsinfo::is_pseudo(&f);
    if !md.is_file() || pseudo {
        return Ok(pipe(f));
    }
    // Procfs and sysfs state 0 or a page: those are read to their end,
    // never cut at their stated size; so is an empty file, held to stay so.
    if md.len() == 0 {
        return Ok(pipe(srcfile::Unsized::new(f, p)));
    }
    let id = FileId::of(&md);
    match first {
        Some(first) => first.unchanged(p, &md)?,
        None => *first = Some(id.clone()),
    }
    Ok(Source::File(Watched {
        file: Arc::new(f),
        path: p.to_path_buf(),
        id,
    }))
}

fn pipe(r: impl Read + Send + 'static) -> Source {
    Source::Pipe {
        reader: Box::new(r),
        child: None,
    }
}

pub(crate) struct SharedFile(pub Arc<File>, pub u64);
impl Read for SharedFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read_at(buf, self.1)?;
        self.1 += n as u64;
        Ok(n)
    }
}

pub(super) struct SrcState {
    reader: Box<dyn Read + Send>,
    /// Some(bytes left) for the mem: source, which needs no reading.
    mem_left: Option<u64>,
    seq: u64,
    /// Bytes taken from the source so far.
    read: u64,
    /// Set at end of input: the number of chunks.
    pub(super) total: Option<u64>,
    child: Option<Child>,
    error: Option<String>,
}

impl Drop for SrcState {
    fn drop(&mut self) {
        // Only reached with a child still here if the transfer was aborted.
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The source of stream mode, shared by all sender threads: each takes the
/// next chunk itself, which avoids a reader thread and a hand-off per chunk.
pub(crate) struct StreamSrc {
    pub(super) chunk: usize,
    pub(super) skip: u64,
    pub(super) hash: bool,
    pub(super) abort: Arc<AtomicBool>,
    pub(super) zero: Option<Vec<u8>>,
    /// --expect-size: the source must be exactly this long.
    expect: Option<u64>,
    pub(super) st: Mutex<SrcState>,
}

impl StreamSrc {
    /// The source of a push: what the receiver already has (`skip` chunks)
    /// is read and hashed, not sent; a file is read up to the size it had
    /// when the transfer started (a file that grows is caught at the end,
    /// srcfile.rs, not followed for ever).
    pub(crate) fn new(
        src: Source,
        skip: u64,
        chunk: usize,
        hash: bool,
        abort: Arc<AtomicBool>,
        expect: Option<u64>,
    ) -> StreamSrc {
        let (reader, mem, child): (Box<dyn Read + Send>, Option<u64>, _) = match src {
            Source::File(w) => (Box::new(SharedFile(w.file, 0).take(w.id.size)), None, None),
            Source::Mem { size } => (Box::new(std::io::empty()), Some(size), None),
            Source::Pipe { reader, child } => (reader, None, child),
        };
        StreamSrc {
            chunk,
            skip,
            hash,
            abort,
            zero: mem.map(|_| vec![0u8; chunk]),
            expect,
            st: Mutex::new(SrcState {
                reader,
                mem_left: mem,
                seq: 0,
                read: 0,
                total: None,
                child,
                error: None,
            }),
        }
    }

    /// A plain reader (no producer, nothing to skip), as a pull's server sends.
    pub(crate) fn plain(
        reader: Box<dyn Read + Send>,
        chunk: usize,
        hash: bool,
        abort: Arc<AtomicBool>,
    ) -> StreamSrc {
        StreamSrc {
            chunk,
            skip: 0,
            hash,
            abort,
            zero: None,
            expect: None,
            st: Mutex::new(SrcState {
                reader,
                mem_left: None,
                seq: 0,
                read: 0,
                total: None,
                child: None,
                error: None,
            }),
        }
    }

    /// Fills `buf` with the next chunk; None at end of input.
    pub(super) fn next(&self, buf: &mut Vec<u8>) -> Result<Option<(u64, usize)>> {
        let mut st = self.st.lock().unwrap();
        if let Some(e) = &st.error {
            bail!("{e}");
        }
        if st.total.is_some() {
            return Ok(None);
        }
        let n = match st.mem_left {
            Some(left) => {
                let n = left.min(self.chunk as u64) as usize;
                st.mem_left = Some(left - n as u64);
                n
            }
            None => {
                // Fill whole chunks so chunk boundaries are the same on a
                // re-run (pipe resume depends on it). The buffer is touched
                // only as bytes arrive.
                buf.clear();
                let chunk = self.chunk as u64;
                match (&mut st.reader).take(chunk).read_to_end(buf) {
                    Ok(n) => n,
                    Err(e) => {
                        st.error = Some(format!("reading source: {e}"));
                        bail!("reading source: {e}");
                    }
                }
            }
        };
        let seq = st.seq;
        if n > 0 {
            st.seq += 1;
        }
        st.read += n as u64;
        if let Some(want) = self.expect.filter(|w| st.read > *w) {
            st.error = Some(format!(
                "the source is longer than --expect-size {want}; nothing was committed"
            ));
            bail!("{}", st.error.as_ref().unwrap());
        }
        if n < self.chunk {
            // End of input: a producer that failed must not look like a
            // complete stream to the receiver.
            if let Some(mut c) = st.child.take() {
                match c.wait() {
                    Ok(s) if s.success() => {}
                    Ok(s) => st.error = Some(format!("producer command failed: {s}")),
                    Err(e) => st.error = Some(format!("waiting for producer: {e}")),
                }
            }
            if let Some(want) = self.expect.filter(|w| st.read != *w) {
                st.error = Some(format!(
                    "the source ended after {} bytes, but --expect-size is {want}; nothing was \
                     committed",
                    st.read
                ));
            }
            if st.seq < self.skip {
                st.error = Some(
                    "source is shorter than what the receiver already has; rerun with --no-resume"
                        .into(),
                );
            }
            if let Some(e) = &st.error {
                bail!("{e}");
            }
            st.total = Some(st.seq);
        }
        Ok((n > 0).then_some((seq, n)))
    }
}
