//! An authenticated connection: a TCP socket, after the handshake, either
//! in the clear or encrypted (Noise transport messages, see crypt.rs).
//!
//! Encrypted, every byte travels in messages of at most 64 KiB, each
//! `u16 length ‖ ciphertext ‖ 16-byte tag`, with a counter nonce per
//! direction: a flipped, injected, dropped, reordered or replayed message
//! fails the tag check, and the read fails with an integrity error (never
//! a byte of altered data). Reading and writing have their own state, so
//! one thread may read while another writes (as on a plain socket).
//! Buffers are allocated once per connection, not per message.

use crate::crypt::{self, Crypto, MAX_MSG, MAX_PLAIN, TAG_LEN};
use crate::proto::{self, Auth};
use anyhow::Result;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Messages sealed per socket write (fewer system calls for big writes).
const MSGS_PER_WRITE: usize = 4;
/// Ciphertext read from the socket at once (several messages).
const RAW_BUF: usize = 4 * (MAX_MSG + 2);

pub struct Conn {
    sock: TcpStream,
    sec: Option<Arc<Secure>>,
}

struct Secure {
    keys: snow::StatelessTransportState,
    tx: Mutex<Tx>,
    rx: Mutex<Rx>,
}

struct Tx {
    nonce: u64,
    buf: Vec<u8>,
    broken: bool,
}

struct Rx {
    nonce: u64,
    /// Ciphertext read but not yet opened: `raw[start..end]`.
    raw: Vec<u8>,
    start: usize,
    end: usize,
    /// Plaintext opened but not yet returned: `plain[pos..len]`.
    plain: Vec<u8>,
    pos: usize,
    len: usize,
    broken: bool,
}

fn integrity_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "integrity check failed on the encrypted connection: data was altered, injected, \
         reordered or dropped in transit",
    )
}

/// A read error as `what` ("connection lost"), unless the encrypted
/// connection failed its integrity check: that one is said as it is.
pub fn lost(e: io::Error, what: &'static str) -> anyhow::Error {
    if e.kind() == io::ErrorKind::InvalidData {
        anyhow::Error::new(e)
    } else {
        anyhow::Error::new(e).context(what)
    }
}

impl Conn {
    /// A connection in the clear (tests, and before the handshake).
    pub fn plain(sock: TcpStream) -> Conn {
        Conn { sock, sec: None }
    }

    fn stance(sock: &TcpStream, auth: &Auth, mode: Crypto) -> Result<crypt::Stance> {
        let keyed = matches!(auth, Auth::Key(_));
        Ok(crypt::stance(
            mode,
            keyed,
            sock.local_addr()?.ip(),
            sock.peer_addr()?.ip(),
        ))
    }

    /// The client's side: authenticate, agree on encryption, key it.
    pub fn client(mut sock: TcpStream, auth: &Auth, mode: Crypto) -> Result<Conn> {
        let stance = Self::stance(&sock, auth, mode)?;
        let agreed = proto::client_handshake(&mut sock, auth, mode, stance)?;
        Self::secure(sock, auth, agreed, true)
    }

    /// The server's side of `client`.
    pub fn server(mut sock: TcpStream, auth: &Auth, mode: Crypto) -> Result<Conn> {
        let stance = Self::stance(&sock, auth, mode)?;
        let agreed = proto::server_handshake(&mut sock, auth, stance)?;
        Self::secure(sock, auth, agreed, false)
    }

    fn secure(mut sock: TcpStream, auth: &Auth, a: proto::Agreed, client: bool) -> Result<Conn> {
        let (Auth::Key(key), true) = (auth, a.encrypt) else {
            return Ok(Conn::plain(sock));
        };
        let keys = crypt::handshake(&mut sock, key, &a.binding, client)?;
        let sec = Secure {
            keys,
            tx: Mutex::new(Tx {
                nonce: 0,
                buf: vec![0; MSGS_PER_WRITE * (MAX_MSG + 2)],
                broken: false,
            }),
            rx: Mutex::new(Rx {
                nonce: 0,
                raw: vec![0; RAW_BUF],
                start: 0,
                end: 0,
                plain: vec![0; MAX_MSG],
                pos: 0,
                len: 0,
                broken: false,
            }),
        };
        Ok(Conn {
            sock,
            sec: Some(Arc::new(sec)),
        })
    }

    pub fn encrypted(&self) -> bool {
        self.sec.is_some()
    }

    pub fn try_clone(&self) -> io::Result<Conn> {
        Ok(Conn {
            sock: self.sock.try_clone()?,
            sec: self.sec.clone(),
        })
    }

    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.sock.shutdown(how)
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.sock.set_read_timeout(t)
    }

    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.sock.set_write_timeout(t)
    }

    fn read_impl(&self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(sec) = &self.sec else {
            return (&self.sock).read(buf);
        };
        if buf.is_empty() {
            return Ok(0);
        }
        let mut rx = sec.rx.lock().unwrap();
        if rx.broken {
            return Err(integrity_error());
        }
        let r = rx.read(&sec.keys, &self.sock, buf);
        if matches!(&r, Err(e) if e.kind() == io::ErrorKind::InvalidData) {
            rx.broken = true;
        }
        r
    }

    fn write_impl(&self, buf: &[u8]) -> io::Result<usize> {
        let Some(sec) = &self.sec else {
            return (&self.sock).write(buf);
        };
        let mut tx = sec.tx.lock().unwrap();
        if tx.broken {
            return Err(io::Error::other(
                "an earlier write on this connection failed",
            ));
        }
        let r = tx.write(&sec.keys, &self.sock, buf);
        tx.broken |= r.is_err();
        r
    }
}

impl Tx {
    /// Seals up to `MSGS_PER_WRITE` messages of `buf` and writes them whole.
    fn write(
        &mut self,
        keys: &snow::StatelessTransportState,
        mut sock: &TcpStream,
        buf: &[u8],
    ) -> io::Result<usize> {
        let take = buf.len().min(MSGS_PER_WRITE * MAX_PLAIN);
        let mut at = 0;
        for piece in buf[..take].chunks(MAX_PLAIN) {
            let out = &mut self.buf[at + 2..at + 2 + MAX_MSG];
            let n = keys
                .write_message(self.nonce, piece, out)
                .map_err(|e| io::Error::other(format!("encrypting: {e}")))?;
            self.nonce += 1;
            self.buf[at..at + 2].copy_from_slice(&(n as u16).to_be_bytes());
            at += 2 + n;
        }
        sock.write_all(&self.buf[..at])?;
        Ok(take)
    }
}

impl Rx {
    /// The next plaintext bytes: buffered ones, else the next message
    /// (opened straight into `buf` when it fits). Ok(0) only at a clean end
    /// of the connection between two messages.
    fn read(
        &mut self,
        keys: &snow::StatelessTransportState,
        mut sock: &TcpStream,
        buf: &mut [u8],
    ) -> io::Result<usize> {
        loop {
            if self.pos < self.len {
                let n = (self.len - self.pos).min(buf.len());
                buf[..n].copy_from_slice(&self.plain[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            if let Some(n) = self.open_next(keys, buf)? {
                if n > 0 {
                    return Ok(n);
                }
                continue;
            }
            if self.start > 0 {
                self.raw.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let end = self.end;
            let got = sock.read(&mut self.raw[end..])?;
            if got == 0 {
                if self.end == 0 {
                    return Ok(0);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed in the middle of an encrypted message",
                ));
            }
            self.end += got;
        }
    }

    /// Opens the next whole message in `raw`, if there is one: into `buf`
    /// if its plaintext fits, else into `plain`. Some(bytes put in `buf`).
    fn open_next(
        &mut self,
        keys: &snow::StatelessTransportState,
        buf: &mut [u8],
    ) -> io::Result<Option<usize>> {
        let have = self.end - self.start;
        if have < 2 {
            return Ok(None);
        }
        let len = u16::from_be_bytes([self.raw[self.start], self.raw[self.start + 1]]) as usize;
        if len < TAG_LEN {
            return Err(integrity_error());
        }
        if have < 2 + len {
            return Ok(None);
        }
        let msg = &self.raw[self.start + 2..self.start + 2 + len];
        let direct = buf.len() >= len - TAG_LEN;
        let out = if direct { buf } else { &mut self.plain[..] };
        let n = keys
            .read_message(self.nonce, msg, out)
            .map_err(|_| integrity_error())?;
        self.nonce += 1;
        self.start += 2 + len;
        if direct {
            return Ok(Some(n));
        }
        (self.pos, self.len) = (0, n);
        Ok(Some(0))
    }
}

impl Read for &Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf)
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf)
    }
}

impl Write for &Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_impl(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_impl(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for Conn {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

impl AsFd for Conn {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}
