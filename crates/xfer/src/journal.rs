//! Receiver-side journal of verified chunks, for resume.
//!
//! Layout: magic, u32 header length, JSON header (what is being received),
//! then 16-byte records (chunk index, chunk hash), appended only after the
//! chunk's data has been written. A record torn by a crash is ignored, and
//! every record is re-checked against the data file before it is trusted.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};

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
    /// Returns the journal (positioned for appending) and its records if the
    /// existing journal describes the same transfer; otherwise starts afresh.
    pub fn open(
        mut file: File,
        header: &Header,
        resume: bool,
    ) -> Result<(Journal, Vec<(u64, u64)>)> {
        let mut records = Vec::new();
        let mut matched = false;
        if resume {
            let mut buf = Vec::new();
            file.read_to_end(&mut buf).context("reading journal")?;
            if buf.len() >= 11 && &buf[..7] == MAGIC {
                let hl = u32::from_le_bytes(buf[7..11].try_into().unwrap()) as usize;
                if buf.len() >= 11 + hl {
                    if let Ok(h) = serde_json::from_slice::<Header>(&buf[11..11 + hl]) {
                        if &h == header {
                            matched = true;
                            for r in buf[11 + hl..].chunks_exact(16) {
                                records.push((
                                    u64::from_le_bytes(r[..8].try_into().unwrap()),
                                    u64::from_le_bytes(r[8..].try_into().unwrap()),
                                ));
                            }
                        }
                    }
                }
            }
        }
        if !matched {
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            let h = serde_json::to_vec(header)?;
            let mut out = MAGIC.to_vec();
            out.extend_from_slice(&(h.len() as u32).to_le_bytes());
            out.extend_from_slice(&h);
            file.write_all(&out)?;
        } else {
            // Drop a torn trailing record so new records stay aligned.
            let hl = 11 + serde_json::to_vec(header)?.len() as u64;
            let end = hl + 16 * records.len() as u64;
            file.set_len(end)?;
            file.seek(SeekFrom::Start(end))?;
        }
        Ok((Journal { file }, records))
    }

    pub fn append(&mut self, index: u64, hash: u64) -> Result<()> {
        let mut r = [0u8; 16];
        r[..8].copy_from_slice(&index.to_le_bytes());
        r[8..].copy_from_slice(&hash.to_le_bytes());
        self.file.write_all(&r).context("writing journal")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let (mut j, r) = Journal::open(open(), &h, true).unwrap();
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
        let (mut j, r) = Journal::open(open(), &h, true).unwrap();
        assert_eq!(r, vec![(2, 22), (0, 10)]);
        j.append(1, 11).unwrap();
        drop(j);
        let (_, r) = Journal::open(open(), &h, true).unwrap();
        assert_eq!(r.len(), 3);
        let h2 = Header {
            src_id: "b".into(),
            ..h.clone()
        };
        let (_, r) = Journal::open(open(), &h2, true).unwrap();
        assert!(r.is_empty());
        let (_, r) = Journal::open(open(), &h2, false).unwrap();
        assert!(r.is_empty());
        std::fs::remove_file(&p).unwrap();
    }
}
