//! Encryption of connections: whether a connection is encrypted (the flag,
//! and the default by address), and the Noise handshake that keys it.
//!
//! The cryptography is the `snow` crate's (Noise, `NNpsk0`, X25519,
//! ChaCha20-Poly1305, BLAKE2s); the pre-shared key comes from the key file
//! through HKDF-SHA256 (the `hkdf` crate). Nothing here is hand-written
//! cryptography: this module only frames Noise messages on the socket.

use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::net::IpAddr;

/// The Noise protocol every encrypted connection runs. NN: no static keys;
/// psk0: both ends prove the pre-shared key in the first message, so only a
/// holder of the key can complete it, and fresh ephemeral keys make every
/// connection's keys new (a recorded connection cannot be replayed).
pub const NOISE_PARAMS: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";
/// Largest Noise message (the protocol's bound), and the AEAD tag in it.
pub const MAX_MSG: usize = 65535;
pub const TAG_LEN: usize = 16;
/// Most plaintext one transport message carries.
pub const MAX_PLAIN: usize = MAX_MSG - TAG_LEN;

/// `--encrypt` / `--plaintext` / neither (the default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crypto {
    /// Encrypted unless both ends of the connection are loopback addresses.
    Auto,
    /// `--encrypt`: always encrypted (loopback too).
    On,
    /// `--plaintext`: never encrypted (authenticated only).
    Off,
}

/// The flags, shared by `send` and `serve`.
#[derive(clap::Args, Debug)]
pub struct CryptoArgs {
    /// Encrypt every connection, loopback too [default: encrypted unless
    /// both ends of the connection are loopback addresses].
    #[arg(long, conflicts_with = "plaintext")]
    encrypt: bool,
    /// Never encrypt: connections are authenticated only (trusted
    /// networks).
    #[arg(long)]
    plaintext: bool,
}

impl CryptoArgs {
    pub fn mode(&self, insecure: bool) -> Result<Crypto> {
        if self.encrypt && insecure {
            return Err(crate::util::usage(
                "--encrypt needs a key: it cannot go with --insecure",
            ));
        }
        Ok(match (self.encrypt, self.plaintext) {
            (true, _) => Crypto::On,
            (_, true) => Crypto::Off,
            _ => Crypto::Auto,
        })
    }
}

/// What one end accepts on one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stance {
    /// Either (the default on loopback); plaintext unless the other end
    /// requires encryption.
    Either,
    /// Encryption required (`--encrypt`, or the default off loopback).
    Encrypt,
    /// Plaintext required (`--plaintext`, or no key: `--insecure`).
    Plain,
}

impl Stance {
    pub fn code(self) -> u8 {
        match self {
            Stance::Either => 0,
            Stance::Encrypt => 1,
            Stance::Plain => 2,
        }
    }

    pub fn from_code(c: u8) -> Option<Stance> {
        [Stance::Either, Stance::Encrypt, Stance::Plain]
            .into_iter()
            .find(|s| s.code() == c)
    }

    /// Whether this end accepts a connection encrypted (or not).
    pub fn accepts(self, encrypted: bool) -> bool {
        match self {
            Stance::Either => true,
            Stance::Encrypt => encrypted,
            Stance::Plain => !encrypted,
        }
    }
}

/// A loopback address, IPv4-mapped IPv6 (`::ffff:127.0.0.1`) included.
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_loopback(),
        IpAddr::V6(a) => a.is_loopback() || a.to_ipv4_mapped().is_some_and(|v| v.is_loopback()),
    }
}

/// This end's stance on a connection between `local` and `peer`: the
/// default encrypts unless both are loopback addresses. Without a key
/// (`keyed` false) nothing can be encrypted.
pub fn stance(c: Crypto, keyed: bool, local: IpAddr, peer: IpAddr) -> Stance {
    match c {
        _ if !keyed => Stance::Plain,
        Crypto::On => Stance::Encrypt,
        Crypto::Off => Stance::Plain,
        Crypto::Auto if is_loopback(local) && is_loopback(peer) => Stance::Either,
        Crypto::Auto => Stance::Encrypt,
    }
}

/// The client's choice from both stances (true: encrypt), or why the two
/// ends cannot agree: one line, naming the flag that would fix it.
pub fn agree(c: Crypto, client: Stance, server: Stance) -> Result<bool> {
    match (client, server) {
        (Stance::Encrypt, Stance::Plain) if c == Crypto::On => bail!(
            "encryption mode mismatch: this client requires encryption (--encrypt) but the \
             server runs unencrypted (--plaintext or --insecure): refusing to send in the clear"
        ),
        (Stance::Encrypt, Stance::Plain) => bail!(
            "encryption mode mismatch: the server runs unencrypted (--plaintext) but this \
             connection is not on loopback, so encryption is on by default: pass --plaintext \
             to send unencrypted (only on a trusted network)"
        ),
        (Stance::Plain, Stance::Encrypt) => bail!(
            "encryption mode mismatch: the server requires encryption but this client runs \
             unencrypted (--plaintext): drop --plaintext"
        ),
        (Stance::Encrypt, _) | (_, Stance::Encrypt) => Ok(true),
        _ => Ok(false),
    }
}

/// The 32-byte Noise pre-shared key, from the key file's bytes.
pub fn derive_psk(key: &[u8]) -> [u8; 32] {
    let mut psk = [0u8; 32];
    hkdf::Hkdf::<sha2::Sha256>::new(Some(b"xfer3 noise psk salt"), key)
        .expand(b"xfer3 Noise_NNpsk0 psk", &mut psk)
        .expect("32 bytes is a valid HKDF-SHA256 length");
    psk
}

fn params() -> snow::params::NoiseParams {
    NOISE_PARAMS.parse().expect("a valid Noise protocol name")
}

fn send_noise<S: Write>(s: &mut S, msg: &[u8]) -> Result<()> {
    let mut out = Vec::with_capacity(2 + msg.len());
    out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    out.extend_from_slice(msg);
    s.write_all(&out)?;
    Ok(())
}

fn recv_noise<S: Read>(s: &mut S, buf: &mut [u8]) -> Result<usize> {
    let mut len = [0u8; 2];
    s.read_exact(&mut len)
        .context("connection closed during the encrypted handshake")?;
    let len = u16::from_be_bytes(len) as usize;
    s.read_exact(&mut buf[..len])
        .context("connection closed during the encrypted handshake")?;
    Ok(len)
}

/// Runs the Noise handshake on `s` (the client initiates) and returns the
/// transport keys. `prologue` binds it to what both ends already agreed
/// (the authentication's nonces and the chosen mode), so a handshake
/// cannot be moved to another connection.
pub fn handshake<S: Read + Write>(
    s: &mut S,
    key: &[u8],
    prologue: &[u8],
    initiator: bool,
) -> Result<snow::StatelessTransportState> {
    let psk = derive_psk(key);
    let b = snow::Builder::new(params()).psk(0, &psk).prologue(prologue);
    let mut hs = if initiator {
        b.build_initiator()
    } else {
        b.build_responder()
    }
    .map_err(|e| anyhow::anyhow!("setting up the encrypted handshake: {e}"))?;
    let (mut msg, mut payload) = (vec![0u8; 1024], vec![0u8; 1024]);
    let failed = |e: snow::Error| {
        anyhow::anyhow!(
            "encrypted handshake failed ({e}): the connection was tampered with, or the keys differ"
        )
    };
    while !hs.is_handshake_finished() {
        if hs.is_my_turn() {
            let n = hs.write_message(&[], &mut msg).map_err(failed)?;
            send_noise(s, &msg[..n])?;
        } else {
            let n = recv_noise(s, &mut msg)?;
            hs.read_message(&msg[..n], &mut payload).map_err(failed)?;
        }
    }
    hs.into_stateless_transport_mode()
        .map_err(|e| anyhow::anyhow!("finishing the encrypted handshake: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn default_is_on_off_loopback_and_either_on_it() {
        let lo = ip("127.0.0.1");
        for peer in ["10.0.0.2", "192.168.1.5", "2001:db8::1", "0.0.0.0"] {
            assert_eq!(stance(Crypto::Auto, true, lo, ip(peer)), Stance::Encrypt);
            assert_eq!(stance(Crypto::Auto, true, ip(peer), lo), Stance::Encrypt);
        }
        for (a, b) in [
            ("127.0.0.1", "127.0.0.1"),
            ("127.0.0.1", "127.1.2.3"),
            ("::1", "::1"),
        ] {
            assert_eq!(stance(Crypto::Auto, true, ip(a), ip(b)), Stance::Either);
        }
        let mapped = ip("::ffff:127.0.0.1");
        assert_eq!(stance(Crypto::Auto, true, mapped, mapped), Stance::Either);
        let far = ip("10.1.1.1");
        assert_eq!(stance(Crypto::On, true, lo, lo), Stance::Encrypt);
        assert_eq!(stance(Crypto::Off, true, far, far), Stance::Plain);
        assert_eq!(stance(Crypto::On, false, lo, lo), Stance::Plain);
        // Loopback on both ends: plaintext unless one end asks.
        assert!(!agree(Crypto::Auto, Stance::Either, Stance::Either).unwrap());
        assert!(agree(Crypto::On, Stance::Encrypt, Stance::Either).unwrap());
        assert!(agree(Crypto::Auto, Stance::Either, Stance::Encrypt).unwrap());
        assert!(!agree(Crypto::Off, Stance::Plain, Stance::Either).unwrap());
        for (c, a, b) in [
            (Crypto::Off, Stance::Plain, Stance::Encrypt),
            (Crypto::On, Stance::Encrypt, Stance::Plain),
            (Crypto::Auto, Stance::Encrypt, Stance::Plain),
        ] {
            let e = agree(c, a, b).unwrap_err().to_string();
            assert!(
                e.starts_with("encryption mode mismatch") && !e.contains('\n'),
                "{e}"
            );
        }
        for s in [Stance::Either, Stance::Encrypt, Stance::Plain] {
            assert_eq!(Stance::from_code(s.code()), Some(s));
        }
        assert_eq!(Stance::from_code(3), None);
    }

    fn run(kc: &'static [u8], ks: &'static [u8], pc: &'static [u8]) -> (bool, bool) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || handshake(&mut a, ks, b"p", false).is_ok());
        let c = handshake(&mut b, kc, pc, true).is_ok();
        drop(b);
        (c, t.join().unwrap())
    }

    #[test]
    fn handshake_needs_the_same_key_and_prologue() {
        assert_eq!(
            run(b"key-one-key-one!", b"key-one-key-one!", b"p"),
            (true, true)
        );
        assert!(!run(b"key-one-key-one!", b"key-two-key-two!", b"p").1);
        assert!(!run(b"key-one-key-one!", b"key-one-key-one!", b"q").1);
        assert_ne!(derive_psk(b"a"), derive_psk(b"b"));
    }
}
