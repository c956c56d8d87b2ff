//! Wire protocol: authentication handshake, length-prefixed JSON control
//! messages, and binary data frames.

use crate::crypt::{Crypto, Stance};
use anyhow::{bail, Context, Result};
use hmac::{Hmac, Mac};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use sha2::Sha256;
use std::io::{Read, Write};

type HmacSha256 = Hmac<Sha256>;

/// The greeting names the protocol version: 3 since connections may be
/// encrypted (2: the end-to-end digest became a sum; 1 hashed the chunk
/// hashes in order).
const HELLO_MAGIC: &[u8; 6] = b"XFER3\n";
const HELLO_V1: &[u8; 6] = b"XFER1\n";
const HELLO_V2: &[u8; 6] = b"XFER2\n";
/// Sent instead of the hello when the server cannot take another connection,
/// followed by a short reason and the end of the connection.
const BUSY_MAGIC: &[u8; 6] = b"XFERB\n";
/// Longest busy reason a client reads.
const MAX_BUSY_LEN: u64 = 512;
/// Messages a client sends (requests, its digest, a pull's start) are small:
/// the bound stops a peer from making the server allocate for a length it
/// merely states.
pub const MAX_REQUEST_LEN: usize = 64 << 10;
/// Messages a server sends: the verdict carries up to `MAX_SAMPLES` goodput
/// samples, the reply up to `MAX_HAVE_RANGES` ranges.
pub const MAX_REPLY_LEN: usize = 16 << 20;
/// Hard upper bound on a data chunk; the server may lower it.
pub const MAX_CHUNK: u32 = 16 << 20;
/// Smallest chunk: below it per-chunk costs (frame header, journal record,
/// reorder entry) dominate, and a reorder window of chunks would hold
/// millions of entries.
pub const MIN_CHUNK: u32 = 4 << 10;
/// Most chunks in one stripe transfer. The receiver keeps one bit per chunk
/// (8 MiB at this bound), so a client's stated size cannot make it allocate
/// more. 64 TiB in 1 MiB chunks; a bigger file needs a bigger --chunk (or
/// stream mode, which keeps no per-chunk state).
pub const MAX_CHUNKS: u64 = 1 << 26;
/// Most ranges of verified chunks a receiver reports for resume (a bound on
/// the reply's size); a journal more fragmented than this starts over.
pub const MAX_HAVE_RANGES: usize = 1 << 16;
/// Most goodput samples a receiver keeps per session; beyond it, adjacent
/// intervals are merged (the interval doubles), so memory and the verdict
/// stay bounded however long the transfer runs.
pub const MAX_SAMPLES: usize = 1 << 16;
/// Longest sampling interval a server accepts (one hour).
pub const MAX_INTERVAL_MS: u64 = 3_600_000;

/// The smallest power-of-two chunk (at least `MIN_CHUNK`) that
/// keeps `size` within `MAX_CHUNKS`, for error messages.
pub fn chunk_needed(size: u64) -> u64 {
    size.div_ceil(MAX_CHUNKS)
        .next_power_of_two()
        .max(MIN_CHUNK as u64)
}

/// Refuses a stripe transfer of `size` bytes in `chunk`-byte chunks that
/// would need more than `MAX_CHUNKS` chunks, naming the limit and the fix.
pub fn check_chunk_count(size: u64, chunk: u32) -> Result<u64> {
    let n = size.div_ceil(chunk as u64);
    if n > MAX_CHUNKS {
        bail!(
            "{} in {} chunks is {n} chunks, more than the limit of {MAX_CHUNKS} chunks per \
             transfer: use --chunk {} or larger (or --mode stream)",
            crate::util::human_bytes(size),
            crate::util::human_bytes(chunk as u64),
            crate::util::human_size_arg(chunk_needed(size)),
        );
    }
    Ok(n)
}

pub const FRAME_MAGIC: u32 = 0x5846_5231; // "XFR1"
pub const FRAME_HDR_LEN: usize = 32;
pub const KIND_DATA: u8 = 1;
pub const KIND_END: u8 = 2;

/// Shared-secret HMAC challenge–response, mutual: the server proves it holds
/// the key too, so a client never streams data into an impostor.
#[derive(Clone)]
pub enum Auth {
    Key(Vec<u8>),
    Insecure,
}

/// What the handshake settled: whether the connection is encrypted, and
/// what binds the encrypted handshake to this one (its nonces and mode).
#[derive(Debug)]
pub struct Agreed {
    pub encrypt: bool,
    pub binding: Vec<u8>,
}

impl Agreed {
    fn new(encrypt: bool, nonce_s: &[u8], nonce_c: &[u8]) -> Agreed {
        let mut binding = b"xfer3 noise prologue".to_vec();
        binding.extend_from_slice(nonce_s);
        binding.extend_from_slice(nonce_c);
        binding.push(encrypt as u8);
        Agreed { encrypt, binding }
    }
}

/// Status bytes of the server's answer to the client's proof.
const AUTH_OK: u8 = 1;
const AUTH_WRONG_KEY: u8 = 0;
const AUTH_WRONG_MODE: u8 = 2;

fn mac(key: &[u8], label: &[u8], a: &[u8], b: &[u8], encrypt: bool) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(key).expect("hmac accepts any key length");
    m.update(label);
    m.update(a);
    m.update(b);
    m.update(&[encrypt as u8]);
    m
}

/// The server's side. The hello states whether the server has a key and
/// its stance on encryption for this connection; the client's answer
/// names its choice under its MAC (so it cannot be changed in transit),
/// and the server's proof covers it too.
pub fn server_handshake<S: Read + Write>(s: &mut S, auth: &Auth, stance: Stance) -> Result<Agreed> {
    let nonce_s: [u8; 32] = crate::util::random_bytes()?;
    let mut hello = Vec::with_capacity(39);
    hello.extend_from_slice(HELLO_MAGIC);
    hello.push(matches!(auth, Auth::Key(_)) as u8 | stance.code() << 1);
    hello.extend_from_slice(&nonce_s);
    s.write_all(&hello)?;
    let mut resp = [0u8; 65];
    s.read_exact(&mut resp).context("reading client auth")?;
    let (nonce_c, rest) = resp.split_at(32);
    let (choice, mac_c) = (rest[0], &rest[1..]);
    let encrypt = choice == 1;
    match auth {
        Auth::Key(k) => {
            if choice > 1
                || mac(k, b"xfer-v3 client", &nonce_s, nonce_c, encrypt)
                    .verify_slice(mac_c)
                    .is_err()
            {
                let _ = s.write_all(&[AUTH_WRONG_KEY]);
                bail!("authentication failed (wrong key)");
            }
            if !stance.accepts(encrypt) {
                let _ = s.write_all(&[AUTH_WRONG_MODE]);
                bail!(
                    "encryption mode mismatch: the client asked for {} but this server {}",
                    if encrypt { "encryption" } else { "plaintext" },
                    if encrypt {
                        "runs unencrypted (--plaintext)"
                    } else {
                        "requires encryption"
                    }
                );
            }
            let tag = mac(k, b"xfer-v3 server", nonce_c, &nonce_s, encrypt)
                .finalize()
                .into_bytes();
            let mut out = vec![AUTH_OK];
            out.extend_from_slice(&tag);
            s.write_all(&out)?;
        }
        Auth::Insecure => {
            if encrypt {
                let _ = s.write_all(&[AUTH_WRONG_MODE]);
                bail!("encryption mode mismatch: the client asked for encryption, but this server has no key (--insecure)");
            }
            let mut out = vec![AUTH_OK];
            out.extend_from_slice(&[0u8; 32]);
            s.write_all(&out)?;
        }
    }
    Ok(Agreed::new(encrypt, &nonce_s, nonce_c))
}

/// Tells a client the server cannot take its connection (instead of a
/// hello), so it can say "busy" rather than "is this an xfer server?".
/// One small write on a fresh socket: it cannot block the accept loop.
pub fn send_busy<S: Write>(s: &mut S, reason: &str) {
    let mut msg = BUSY_MAGIC.to_vec();
    msg.extend_from_slice(&reason.as_bytes()[..reason.len().min(MAX_BUSY_LEN as usize)]);
    let _ = s.write_all(&msg);
}

/// The client's side of `server_handshake`; `mode` and `stance` are this
/// end's flag and what it makes of this connection (crypt.rs).
pub fn client_handshake<S: Read + Write>(
    s: &mut S,
    auth: &Auth,
    mode: Crypto,
    stance: Stance,
) -> Result<Agreed> {
    let mut hello = [0u8; 39];
    s.read_exact(&mut hello[..6])
        .context("reading server hello (is this an xfer server?)")?;
    if &hello[..6] == BUSY_MAGIC {
        let mut why = Vec::new();
        let _ = s.take(MAX_BUSY_LEN).read_to_end(&mut why);
        let why = String::from_utf8_lossy(&why);
        bail!("server busy: {} (try again later)", why.trim());
    }
    for (old, v) in [(HELLO_V1, 1), (HELLO_V2, 2)] {
        if &hello[..6] == old {
            bail!("the server runs an older xfer (protocol {v}): use the same xfer version on both ends");
        }
    }
    if &hello[..6] != HELLO_MAGIC {
        bail!("peer is not an xfer server (bad greeting)");
    }
    s.read_exact(&mut hello[6..])
        .context("reading server hello (is this an xfer server?)")?;
    let server_wants_key = hello[6] & 1 == 1;
    let Some(server_stance) = Stance::from_code(hello[6] >> 1) else {
        bail!("peer is not an xfer server (bad greeting)");
    };
    let nonce_s = &hello[7..39];
    let nonce_c: [u8; 32] = crate::util::random_bytes()?;
    let encrypt = match (auth, server_wants_key) {
        (Auth::Key(_), true) => crate::crypt::agree(mode, stance, server_stance)?,
        (Auth::Key(_), false) => {
            bail!("server runs without a key (--insecure) but we have one; refusing to downgrade")
        }
        (Auth::Insecure, true) => bail!("server requires a shared key: pass --key-file"),
        (Auth::Insecure, false) => false,
    };
    let mut out = Vec::with_capacity(65);
    out.extend_from_slice(&nonce_c);
    out.push(encrypt as u8);
    match auth {
        Auth::Key(k) => out.extend_from_slice(
            &mac(k, b"xfer-v3 client", nonce_s, &nonce_c, encrypt)
                .finalize()
                .into_bytes(),
        ),
        Auth::Insecure => out.extend_from_slice(&[0u8; 32]),
    }
    s.write_all(&out)?;
    let mut resp = [0u8; 33];
    match s.read_exact(&mut resp[..1]) {
        Ok(()) if resp[0] == AUTH_OK => {}
        Ok(()) if resp[0] == AUTH_WRONG_MODE => bail!(
            "the server refused this connection's encryption mode ({}): use the same \
             --encrypt/--plaintext choice on both ends",
            if encrypt { "encrypted" } else { "plaintext" }
        ),
        _ => bail!("server rejected authentication (wrong key?)"),
    }
    s.read_exact(&mut resp[1..])
        .context("reading server proof")?;
    if let Auth::Key(k) = auth {
        mac(k, b"xfer-v3 server", &nonce_c, nonce_s, encrypt)
            .verify_slice(&resp[1..])
            .map_err(|_| anyhow::anyhow!("server failed to prove it holds the key"))?;
    }
    Ok(Agreed::new(encrypt, nonce_s, &nonce_c))
}

pub fn send_msg<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<()> {
    let body = serde_json::to_vec(msg)?;
    let mut buf = Vec::with_capacity(body.len() + 4);
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf)?;
    w.flush()?;
    Ok(())
}

/// Reads one length-prefixed JSON message of at most `max` bytes. The body
/// buffer grows as bytes arrive, so a stated length costs nothing by itself.
pub fn recv_msg_max<R: Read, T: DeserializeOwned>(r: &mut R, max: usize) -> Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).context("connection closed")?;
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        bail!("control message too large ({len} bytes, at most {max})");
    }
    let mut body = Vec::new();
    r.take(len as u64)
        .read_to_end(&mut body)
        .context("connection closed")?;
    if body.len() != len {
        bail!("connection closed");
    }
    serde_json::from_slice(&body).context("malformed control message")
}

/// A message from a client (read by the server).
pub fn recv_request<R: Read, T: DeserializeOwned>(r: &mut R) -> Result<T> {
    recv_msg_max(r, MAX_REQUEST_LEN)
}

/// A message from the server (read by a client).
pub fn recv_msg<R: Read, T: DeserializeOwned>(r: &mut R) -> Result<T> {
    recv_msg_max(r, MAX_REPLY_LEN)
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Stripe,
    Stream,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Stripe => "stripe",
            Mode::Stream => "stream",
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(rename_all = "lowercase")]
pub enum Sink {
    /// Relative to the server's root.
    Path(String),
    /// Shell command run by the server (needs `serve --allow-cmd`).
    Cmd(String),
    Discard,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Request {
    pub session: String,
    pub streams: u32,
    pub mode: Mode,
    pub chunk: u32,
    /// Known for files; None for pipes of unknown length.
    pub size: Option<u64>,
    pub sink: Sink,
    /// Identifies the source for resume (size, mtime, chunk size...).
    pub src_id: String,
    pub hash: bool,
    pub resume: bool,
    pub interval_ms: u64,
    /// Pull: the server sends the file named by `sink` (see `Start`).
    #[serde(default)]
    pub pull: bool,
    /// Pull: congestion control for the server's data sockets.
    #[serde(default)]
    pub cc: Option<String>,
    /// The destination's parent directories must exist (a DEST that ended
    /// in '/'); otherwise they are created.
    #[serde(default)]
    pub parent_must_exist: bool,
    /// Test hook: the receiver fails the session, as if its data
    /// connections were reset, once it has written this many bytes.
    #[serde(default)]
    pub fault_reset_after: Option<u64>,
    /// Test hook (pulls): the server's senders stop once this many bytes
    /// went out, and wait for their connections to close.
    #[serde(default)]
    pub fault_stall_after: Option<u64>,
}

/// First message on every connection after authentication.
#[derive(Serialize, Deserialize, Debug)]
pub enum Open {
    Control(Request),
    Data { session: String, stream: u32 },
}

#[derive(Serialize, Deserialize, Debug)]
pub enum Reply {
    /// `have` lists half-open ranges of chunk indices already verified.
    Accept {
        have: Vec<(u64, u64)>,
        resumed_bytes: u64,
        /// Pull: size of the file the server will send.
        #[serde(default)]
        size: Option<u64>,
        /// What this server understands beyond protocol 2's first form
        /// (`FEATURE_*`): an older server sends none.
        #[serde(default)]
        features: Vec<String>,
    },
    Joined,
    Reject(String),
}

/// Pull: sent by the client once all data streams joined; the server then
/// starts sending, paced to `pacing` bytes/s per socket if set.
#[derive(Serialize, Deserialize, Debug)]
pub struct Start {
    pub pacing: Option<u64>,
}

/// The server applies `WindowClamp` messages (the cwnd limiter).
pub const FEATURE_WINDOW_CLAMP: &str = "window_clamp";
/// The server reports where the sender's data start falls on its clock
/// (`Finish::data_start_ago`, `Done::data_start`).
pub const FEATURE_DATA_START: &str = "data_start";
/// The client may open fewer data streams than its request announced, some
/// of them late, and says in `Finish::streams_used` how many it opened
/// (`--streams auto`); a stream beyond the announced count is still refused.
pub const FEATURE_LATE_JOIN: &str = "late_join";

/// Sent by the client on the control connection after all data.
#[derive(Serialize, Deserialize, Debug)]
pub struct Finish {
    pub e2e: Option<String>,
    /// Seconds from the sender's data start to this message. The receiver
    /// subtracts it from the message's arrival, which places the data start
    /// on its own clock one forward delay late, i.e. when data sent at the
    /// start would arrive: the origin the profile's steps are measured from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_start_ago: Option<f64>,
    /// The data streams opened, when fewer than announced (`FEATURE_LATE_JOIN`):
    /// the receiver waits for the END frames of these only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams_used: Option<u32>,
}

/// The cwnd limiter: the window each data stream's receiving socket may
/// advertise (TCP_WINDOW_CLAMP, bytes), indexed by stream. Sent by the
/// client on the control connection while the data flows.
#[derive(Serialize, Deserialize, Debug)]
pub struct WindowClamp {
    pub window_clamp: Vec<u32>,
}

/// What a client sends on the control connection after the reply: window
/// clamps while the data flows, then `Finish`. (Untagged, so a `Finish`
/// reads as it always did.)
#[derive(Serialize, Deserialize, Debug)]
#[serde(untagged)]
pub enum ClientCtl {
    Clamp(WindowClamp),
    Finish(Finish),
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct FlowReport {
    pub stream: u32,
    pub start: f64,
    pub end: f64,
    pub bytes: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct GoodputSample {
    pub t: f64,
    pub stream: u32,
    pub bytes: u64,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct Done {
    pub error: Option<String>,
    /// End-to-end digest (hex) over all chunk hashes in order, if hashing.
    pub e2e: Option<String>,
    pub bytes: u64,
    pub total_size: u64,
    pub elapsed: f64,
    pub flows: Vec<FlowReport>,
    pub goodput: Vec<GoodputSample>,
    /// The sender's data start on the receiver's clock (seconds of session
    /// time), from `Finish::data_start_ago`; None from an older server.
    #[serde(default)]
    pub data_start: Option<f64>,
}

#[derive(Debug, Clone, Copy)]
pub struct FrameHdr {
    pub kind: u8,
    /// Chunk index (stripe) or sequence number (stream); for END frames in
    /// stream mode, the total number of chunks.
    pub index: u64,
    pub len: u32,
    pub hash: u64,
}

impl FrameHdr {
    pub fn encode(&self) -> [u8; FRAME_HDR_LEN] {
        let mut b = [0u8; FRAME_HDR_LEN];
        b[0..4].copy_from_slice(&FRAME_MAGIC.to_be_bytes());
        b[4] = self.kind;
        b[8..16].copy_from_slice(&self.index.to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
        b[24..32].copy_from_slice(&self.hash.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; FRAME_HDR_LEN]) -> Result<Self> {
        if u32::from_be_bytes(b[0..4].try_into().unwrap()) != FRAME_MAGIC {
            bail!("corrupt data frame header (bad magic)");
        }
        Ok(FrameHdr {
            kind: b[4],
            index: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            len: u32::from_le_bytes(b[16..20].try_into().unwrap()),
            hash: u64::from_le_bytes(b[24..32].try_into().unwrap()),
        })
    }
}

/// End-to-end digest: the sum, modulo 2^128, of XXH3-128(index ‖ chunk hash)
/// over every chunk (both little-endian u64). Each term binds a chunk's hash
/// to its place, so a changed, missing, duplicated or misplaced chunk changes
/// the sum; and a sum can be accumulated in any order in 16 bytes, so neither
/// side keeps a vector of hashes sized by the transfer (stripe chunks arrive
/// out of order; resumed chunks are added when they are re-verified).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct E2e(u128);

impl E2e {
    pub fn add(&mut self, index: u64, hash: u64) {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&index.to_le_bytes());
        b[8..].copy_from_slice(&hash.to_le_bytes());
        self.0 = self.0.wrapping_add(xxhash_rust::xxh3::xxh3_128(&b));
    }

    pub fn merge(&mut self, other: E2e) {
        self.0 = self.0.wrapping_add(other.0);
    }

    pub fn hex(&self) -> String {
        format!("{:032x}", self.0)
    }
}

pub fn chunk_hash(data: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn pair(server: Auth, client: Auth) -> (Result<()>, Result<()>) {
        let (s, c) = pair_in(server, Stance::Either, client, Stance::Either);
        (s.map(|_| ()), c.map(|_| ()))
    }

    fn pair_in(
        server: Auth,
        ss: Stance,
        client: Auth,
        cs: Stance,
    ) -> (Result<Agreed>, Result<Agreed>) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || server_handshake(&mut a, &server, ss));
        let mode = match cs {
            Stance::Encrypt => Crypto::On,
            Stance::Plain => Crypto::Off,
            Stance::Either => Crypto::Auto,
        };
        let c = client_handshake(&mut b, &client, mode, cs);
        drop(b);
        (t.join().unwrap(), c)
    }

    #[test]
    fn both_ends_agree_on_encryption_or_refuse() {
        let k = || Auth::Key(b"k1k1k1k1k1k1k1k1".to_vec());
        let (s, c) = pair_in(k(), Stance::Either, k(), Stance::Either);
        assert!(!s.unwrap().encrypt && !c.unwrap().encrypt);
        let (s, c) = pair_in(k(), Stance::Either, k(), Stance::Encrypt);
        let (s, c) = (s.unwrap(), c.unwrap());
        assert!(s.encrypt && c.encrypt && s.binding == c.binding);
        let (s, c) = pair_in(k(), Stance::Encrypt, k(), Stance::Either);
        assert!(s.unwrap().encrypt && c.unwrap().encrypt);
        for (ss, cs) in [
            (Stance::Encrypt, Stance::Plain),
            (Stance::Plain, Stance::Encrypt),
        ] {
            let (s, c) = pair_in(k(), ss, k(), cs);
            let e = c.err().unwrap().to_string();
            assert!(e.contains("encryption mode mismatch"), "{e}");
            assert!(s.is_err());
        }
    }

    #[test]
    fn handshake_ok_and_wrong_key() {
        let (s, c) = pair(
            Auth::Key(b"k1k1k1k1k1k1k1k1".to_vec()),
            Auth::Key(b"k1k1k1k1k1k1k1k1".to_vec()),
        );
        assert!(s.is_ok() && c.is_ok());
        let (s, c) = pair(
            Auth::Key(b"k1k1k1k1k1k1k1k1".to_vec()),
            Auth::Key(b"k2k2k2k2k2k2k2k2".to_vec()),
        );
        assert!(s.is_err() && c.is_err());
        let (s, c) = pair(Auth::Key(b"k1k1k1k1k1k1k1k1".to_vec()), Auth::Insecure);
        assert!(s.is_err() && c.is_err());
        let (_, c) = pair(Auth::Insecure, Auth::Key(b"k1k1k1k1k1k1k1k1".to_vec()));
        assert!(c.is_err());
    }

    #[test]
    fn streaming_hash_matches_one_shot() {
        // The receiver hashes payloads piecewise as they arrive.
        let d: Vec<u8> = (0..1_000_003u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for p in d.chunks(65_537) {
            h.update(p);
        }
        assert_eq!(h.digest(), chunk_hash(&d));
    }

    #[test]
    fn e2e_is_order_free_but_binds_index_and_count() {
        let (mut a, mut b) = (E2e::default(), E2e::default());
        for i in 0..100u64 {
            a.add(i, i * 31 + 7);
        }
        for i in (0..100u64).rev() {
            b.add(i, i * 31 + 7);
        }
        assert_eq!(a, b);
        let mut c = E2e::default();
        for i in 0..100u64 {
            // Chunks 3 and 4 swapped: same hashes, wrong places.
            let j = match i {
                3 => 4,
                4 => 3,
                _ => i,
            };
            c.add(i, j * 31 + 7);
        }
        assert_ne!(a, c);
        let mut d = a;
        d.add(5, 5 * 31 + 7); // a duplicate
        assert_ne!(a, d);
        let (mut e, mut f) = (E2e::default(), E2e::default());
        e.add(0, 1);
        f.add(1, 2);
        e.merge(f);
        let mut g = E2e::default();
        g.add(1, 2);
        g.add(0, 1);
        assert_eq!(e, g);
    }

    #[test]
    fn chunk_limit_names_the_fix() {
        assert_eq!(check_chunk_count(1 << 40, 1 << 20).unwrap(), 1 << 20);
        let e = check_chunk_count(16 << 40, 4096).unwrap_err().to_string();
        assert!(e.contains("16.00 TiB") && e.contains("--chunk 256K"), "{e}");
        assert_eq!(chunk_needed(1), MIN_CHUNK as u64);
    }

    #[test]
    fn busy_greeting_is_a_clear_error() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        send_busy(&mut a, "too many connections (1024)");
        drop(a);
        let e = client_handshake(&mut b, &Auth::Insecure, Crypto::Auto, Stance::Plain).unwrap_err();
        assert!(
            e.to_string().contains("server busy: too many connections"),
            "{e}"
        );
    }

    #[test]
    fn an_older_server_is_named() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(b"XFER1\n").unwrap();
        let e = client_handshake(&mut b, &Auth::Insecure, Crypto::Auto, Stance::Plain).unwrap_err();
        assert!(e.to_string().contains("older xfer"), "{e}");
    }

    #[test]
    fn stated_length_is_bounded_and_not_allocated() {
        let mut m = (u32::MAX).to_be_bytes().to_vec();
        m.extend_from_slice(b"{}");
        let e = recv_request::<_, serde_json::Value>(&mut &m[..]).unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
        // A length within the bound but a truncated body: an error, not a hang.
        let mut m = 1000u32.to_be_bytes().to_vec();
        m.extend_from_slice(b"{}");
        assert!(recv_request::<_, serde_json::Value>(&mut &m[..]).is_err());
    }

    #[test]
    fn frame_roundtrip() {
        let h = FrameHdr {
            kind: KIND_DATA,
            index: 7,
            len: 1 << 20,
            hash: 0xdead_beef,
        };
        let d = FrameHdr::decode(&h.encode()).unwrap();
        assert_eq!(
            (d.kind, d.index, d.len, d.hash),
            (KIND_DATA, 7, 1 << 20, 0xdead_beef)
        );
        let mut bad = h.encode();
        bad[0] ^= 1;
        assert!(FrameHdr::decode(&bad).is_err());
    }
}
