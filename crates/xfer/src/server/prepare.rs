//! A push's destination made ready: the part file and its journal, room on
//! the file system, and what a resumed transfer already has.

use super::state::{FileSink, Output, Server, Session, Slot, State};
use crate::chunkset::ChunkSet;
use crate::fsinfo;
use crate::journal::{self, Journal};
use crate::proto::*;
use crate::safepath;
use anyhow::{anyhow, bail, Context, Result};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// Half-open ranges of chunk indices.
pub(super) type Ranges = Vec<(u64, u64)>;
pub(super) type Prepared = (Arc<Session>, Ranges, u64, Option<Child>);

pub(super) fn prepare(srv: &Server, req: &Request) -> Result<Prepared> {
    let nchunks = req.size.map(|s| s.div_ceil(req.chunk as u64)).unwrap_or(0);
    let mut st = State::default();
    let mut have_ranges = Vec::new();
    let mut resumed = 0u64;
    let mut fsink = None;
    let mut child = None;
    match &req.sink {
        Sink::Path(p) => {
            let (fs, ranges, r) = prepare_file(srv, req, p, nchunks, &mut st)?;
            (fsink, have_ranges, resumed) = (Some(fs), ranges, r);
        }
        Sink::Cmd(cmd) => {
            let c = Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .current_dir(&srv.opts.root)
                .stdin(Stdio::piped())
                .stdout(Stdio::inherit())
                .stderr(Stdio::inherit())
                .spawn()
                .with_context(|| format!("starting consumer {cmd:?}"))?;
            child = Some(c);
        }
        Sink::Discard => {
            if req.mode == Mode::Stripe {
                st.have = ChunkSet::new(nchunks);
            }
        }
    }
    st.joined = vec![false; req.streams as usize];
    let output = match child.as_mut() {
        Some(c) => Output::Cmd(c.stdin.take().unwrap()),
        None if fsink.is_some() => Output::File,
        None => Output::Discard,
    };
    let session = Arc::new(Session {
        req: req.clone(),
        start: Instant::now(),
        nchunks,
        fsink,
        // Reorder window: enough to ride out a stream stalling for a few
        // scheduler slices at tens of Gbit/s, bounded to 256 MiB per session.
        cap: ((16u64 << 20) * req.streams as u64).clamp(64 << 20, 256 << 20) / req.chunk as u64,
        state: Mutex::new(st),
        cv: Condvar::new(),
        slots: (0..req.streams)
            .map(|_| Slot {
                bytes: AtomicU64::new(0),
                first: Mutex::new(None),
                end: Mutex::new(None),
                sock: Mutex::new(None),
                clamp: AtomicU32::new(0),
            })
            .collect(),
        stop_sampler: AtomicBool::new(false),
        pool: Mutex::new(Vec::new()),
        output: Mutex::new(Some(output)),
        written: AtomicU64::new(0),
        clamp_keeper: AtomicBool::new(false),
    });
    Ok((session, have_ranges, resumed, child))
}

/// Removes the part file and journal a failed `prepare_file` created, so a
/// refused transfer leaves nothing behind.
pub(super) struct CreatedFiles {
    dir: OwnedFd,
    names: Vec<String>,
    armed: bool,
}

impl Drop for CreatedFiles {
    fn drop(&mut self) {
        if self.armed {
            for n in &self.names {
                safepath::unlink(&self.dir, n);
            }
        }
    }
}

/// Opens the part file and journal of a file destination (after checking
/// there is room for it), and re-verifies what the journal claims: the
/// chunks already present go into `st`; returns the sink, the present chunk
/// ranges and the bytes they hold.
pub(super) fn prepare_file(
    srv: &Server,
    req: &Request,
    rel: &str,
    nchunks: u64,
    st: &mut State,
) -> Result<(FileSink, Ranges, u64)> {
    let comps = safepath::components(rel)?;
    let name = comps.last().unwrap().clone();
    let part = format!(".{name}.xfer-part");
    let jname = format!(".{name}.xfer-journal");
    // Everything up to the space check happens in directories that already
    // exist, so a refused transfer creates nothing.
    let (anc, depth) = safepath::existing_ancestor(&srv.root, rel)?;
    let mount = fsinfo::mount_point(&srv.opts.root.join(comps[..depth].join("/")));
    let parent_exists = depth + 1 == comps.len();
    if parent_exists {
        safepath::check_target(&anc, &name)?;
        if !req.resume {
            // Starting over: what an earlier attempt left is of no use, and
            // freeing it first may be what lets this transfer fit.
            safepath::unlink(&anc, &part);
            safepath::unlink(&anc, &jname);
        }
    }
    check_room(&anc, &part, req, rel, &mount)?;
    let (dir, _) = safepath::open_parent(&srv.root, rel, !req.parent_must_exist)?;
    safepath::check_target(&dir, &name)?;
    let existed = fsinfo::allocated(&dir, &jname) > 0;
    let mut created = CreatedFiles {
        dir: dir.try_clone()?,
        names: vec![part.clone(), jname.clone()],
        armed: !existed,
    };
    let no_space = |e: anyhow::Error| no_space_or(e, &mount, rel);
    let rw = libc::O_RDWR | libc::O_CREAT;
    let file = safepath::open_file(&dir, &part, rw)?;
    let jfile = safepath::open_file(&dir, &jname, rw)?;
    let header = journal_header(req);
    let (mut journal, resumed) = match req.mode {
        Mode::Stripe => resume_stripe(&file, jfile, &header, req, nchunks, st),
        Mode::Stream => resume_stream(&file, jfile, &header, req, st),
    }
    .map_err(no_space)?;
    let ranges = match req.mode {
        Mode::Stripe => st.have.ranges(MAX_HAVE_RANGES).unwrap_or_default(),
        Mode::Stream if st.next > 0 => vec![(0, st.next)],
        Mode::Stream => Vec::new(),
    };
    if resumed == 0 {
        // Journal records that failed verification must not linger.
        let jfile = safepath::open_file(&dir, &jname, rw)?;
        journal = Journal::open(jfile, &header, false, |_, _| false).map_err(no_space)?;
        file.set_len(0)?;
    }
    if req.mode == Mode::Stripe {
        file.set_len(req.size.unwrap_or(0))?;
    } else {
        file.set_len(resumed)?;
    }
    created.armed = false;
    let fs = FileSink {
        dir,
        name,
        part,
        jname,
        file,
        journal: Mutex::new(journal),
        rel: rel.to_string(),
        mount,
    };
    Ok((fs, ranges, resumed))
}

/// Refuses up front a transfer of known size that cannot fit, rather than
/// fill the disk. The part file's blocks count as room: they are reused (on
/// resume) or freed (when starting over).
pub(super) fn check_room(
    dir: &OwnedFd,
    part: &str,
    req: &Request,
    rel: &str,
    mount: &std::path::Path,
) -> Result<()> {
    let Some(size) = req.size else {
        return Ok(());
    };
    let journal = 16 * size.div_ceil(req.chunk as u64) + 4096;
    let need = size.saturating_add(journal);
    let Some(free) = fsinfo::available(dir) else {
        return Ok(());
    };
    let room = free.saturating_add(fsinfo::allocated(dir, part));
    if need > room {
        bail!(
            "no space left on {} for {rel:?}: it needs {}, the server file system has {} free",
            mount.display(),
            crate::util::human_bytes(need),
            crate::util::human_bytes(room)
        );
    }
    Ok(())
}

pub(super) fn journal_header(req: &Request) -> journal::Header {
    journal::Header {
        src_id: req.src_id.clone(),
        mode: req.mode.name().into(),
        chunk: req.chunk,
        size: req.size,
        hash: req.hash,
    }
}

pub(super) fn no_space_or(e: anyhow::Error, mount: &std::path::Path, rel: &str) -> anyhow::Error {
    let io = e.chain().find_map(|c| c.downcast_ref::<std::io::Error>());
    if io.is_some_and(fsinfo::is_no_space) {
        anyhow!(
            "no space left on {} (the server file system holding {rel:?})",
            mount.display()
        )
    } else {
        e
    }
}

/// Re-reads a chunk the journal vouches for and checks it against its hash,
/// so a crash between data and journal writes cannot smuggle in junk.
pub(super) fn verify_chunk(
    file: &File,
    buf: &mut Vec<u8>,
    offset: u64,
    len: u64,
    hash: u64,
    check: bool,
) -> bool {
    buf.resize(len as usize, 0);
    file.read_exact_at(buf, offset).is_ok() && (!check || chunk_hash(buf) == hash)
}

/// Stripe resume: every journal record whose chunk still verifies counts.
/// Records are streamed; the state is one bit per chunk. A journal too
/// fragmented to report (more than MAX_HAVE_RANGES ranges) starts over.
pub(super) fn resume_stripe(
    file: &File,
    jfile: File,
    header: &journal::Header,
    req: &Request,
    nchunks: u64,
    st: &mut State,
) -> Result<(Journal, u64)> {
    let c = req.chunk as u64;
    let size = req.size.unwrap_or(0);
    let flen = file.metadata()?.len();
    let mut have = ChunkSet::new(nchunks);
    let mut e2e = E2e::default();
    let mut resumed = 0u64;
    let mut buf = Vec::new();
    let journal = Journal::open(jfile, header, req.resume, |idx, h| {
        if idx < nchunks && !have.contains(idx) {
            let len = c.min(size - idx * c);
            if idx * c + len <= flen && verify_chunk(file, &mut buf, idx * c, len, h, req.hash) {
                have.insert(idx);
                e2e.add(idx, h);
                resumed += len;
            }
        }
        true
    })?;
    if have.ranges(MAX_HAVE_RANGES).is_none() {
        eprintln!(
            "xfer: journal of {:?} too fragmented to resume; starting over",
            header.src_id
        );
        (have, e2e, resumed) = (ChunkSet::new(nchunks), E2e::default(), 0);
    }
    (st.have, st.e2e) = (have, e2e);
    Ok((journal, resumed))
}

/// Stream resume: only a verified prefix is usable (the producer is re-run).
pub(super) fn resume_stream(
    file: &File,
    jfile: File,
    header: &journal::Header,
    req: &Request,
    st: &mut State,
) -> Result<(Journal, u64)> {
    let c = req.chunk as u64;
    let flen = file.metadata()?.len();
    let (mut next, mut resumed, mut e2e) = (0u64, 0u64, E2e::default());
    let mut buf = Vec::new();
    let journal = Journal::open(jfile, header, req.resume, |idx, h| {
        let len = c.min(flen.saturating_sub(resumed));
        if idx != next || len == 0 || !verify_chunk(file, &mut buf, resumed, len, h, req.hash) {
            return false;
        }
        e2e.add(idx, h);
        resumed += len;
        next += 1;
        len == c // a short chunk ends the stream
    })?;
    (st.next, st.stream_bytes, st.e2e) = (next, resumed, e2e);
    Ok((journal, resumed))
}
