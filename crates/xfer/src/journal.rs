//! Receiver-side journal of verified chunks, for resume.
//!
//! Layout: magic, u32 header length, JSON header (what is being received),
//! then 16-byte records (chunk index, chunk hash), appended only after the
//! chunk's data has been written. A record torn by a crash is ignored, and
//! every record is re-checked against the data file before it is trusted.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};

const MAGIC: &[u8; 7] = b"XFERJ1\n";

#[derive(Serialize, Deserialize, PartialEq, Eq, Debug, Clone)]
pub struct Header {
    pub src_id: String,
    pub mode: String,
    pub chunk: u32,
    pub size: Option<u64>,
    pub hash: bool,
}

pub struct Journal {
    file: File,
}

impl Journal {
    /// Returns the journal, positioned for appending. If `resume` and the
    /// existing journal describes the same transfer, each record is handed to
    /// `visit` in the order written, streamed from disk (a journal can hold
    /// millions of records); `visit` returns false to skip the rest.
    /// Otherwise the journal starts afresh.
    pub fn open(
        mut file: File,
        header: &Header,
        resume: bool,
        mut visit: impl FnMut(u64, u64) -> bool,
    ) -> Result<Journal> {
        let h = serde_json::to_vec(header)?;
        let hl = 11 + h.len() as u64;
        let len = file.metadata().context("reading journal")?.len();
        // Only a header of the length ours has can match, so that is all
        // that is read (whatever length the file states).
        let matched = resume && len >= hl && {
            let mut head = Vec::new();
            (&mut file)
                .take(hl)
                .read_to_end(&mut head)
                .context("reading journal")?;
            head.len() as u64 == hl
                && &head[..7] == MAGIC
                && u32::from_le_bytes(head[7..11].try_into().unwrap()) as usize == h.len()
                && serde_json::from_slice::<Header>(&head[11..]).ok().as_ref() == Some(header)
        };
        if matched {
            // Whole records only: a torn trailing record is dropped so new
            // records stay aligned.
            let n = (len - hl) / 16;
            file.seek(SeekFrom::Start(hl))?;
            let mut r = BufReader::with_capacity(64 << 10, &mut file).take(16 * n);
            let mut rec = [0u8; 16];
            for _ in 0..n {
                r.read_exact(&mut rec).context("reading journal")?;
                let idx = u64::from_le_bytes(rec[..8].try_into().unwrap());
                let hash = u64::from_le_bytes(rec[8..].try_into().unwrap());
                if !visit(idx, hash) {
                    break;
                }
            }
            let end = hl + 16 * n;
            file.set_len(end)?;
            file.seek(SeekFrom::Start(end))?;
        } else {
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            let mut out = MAGIC.to_vec();
            out.extend_from_slice(&(h.len() as u32).to_le_bytes());
            out.extend_from_slice(&h);
            file.write_all(&out)?;
        }
        Ok(Journal { file })
    }

    pub fn append(&mut self, index: u64, hash: u64) -> std::io::Result<()> {
        let mut r = [0u8; 16];
        r[..8].copy_from_slice(&index.to_le_bytes());
        r[8..].copy_from_slice(&hash.to_le_bytes());
        self.file.write_all(&r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn roundtrip_and_mismatch() {
        let p = std::env::temp_dir().join(format!("xfer-journal-{}", std::process::id()));
        let open = || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&p)
                .unwrap()
        };
        let h = Header {
            src_id: "a".into(),
            mode: "stripe".into(),
            chunk: 4,
            size: Some(10),
            hash: true,
        };
        let records = |h: &Header, resume: bool| {
            let mut r = Vec::new();
            let j = Journal::open(open(), h, resume, |i, x| {
                r.push((i, x));
                true
            })
            .unwrap();
            (j, r)
        };
        let (mut j, r) = records(&h, true);
        assert!(r.is_empty());
        j.append(2, 22).unwrap();
        j.append(0, 10).unwrap();
        drop(j);
        // A torn record must be ignored.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(&[1, 2, 3])
            .unwrap();
        let (mut j, r) = records(&h, true);
        assert_eq!(r, vec![(2, 22), (0, 10)]);
        j.append(1, 11).unwrap();
        drop(j);
        // A visitor may stop early; the records after it stay.
        let mut first = None;
        drop(
            Journal::open(open(), &h, true, |i, x| {
                first = Some((i, x));
                false
            })
            .unwrap(),
        );
        assert_eq!(first, Some((2, 22)));
        let (_, r) = records(&h, true);
        assert_eq!(r.len(), 3);
        let h2 = Header {
            src_id: "b".into(),
            ..h.clone()
        };
        let (_, r) = records(&h2, true);
        assert!(r.is_empty());
        let (_, r) = records(&h2, false);
        assert!(r.is_empty());
        // A header length that lies (huge) is not trusted or allocated.
        let f = open();
        f.write_all_at(&u32::MAX.to_le_bytes(), 7).unwrap();
        drop(f);
        let (_, r) = records(&h2, true);
        assert!(r.is_empty());
        std::fs::remove_file(&p).unwrap();
    }
}
