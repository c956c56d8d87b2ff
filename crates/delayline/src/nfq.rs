//! The nfnetlink_queue protocol, written from the kernel UAPI headers
//! (`linux/netlink.h`, `linux/netfilter/nfnetlink.h`,
//! `linux/netfilter/nfnetlink_queue.h`).
//!
//! Encoding and parsing are plain functions on byte buffers (no socket, no clock), so they
//! are unit-tested without a kernel; [`crate::sock`] does the I/O.
//!
//! Layout of every message: `nlmsghdr` (16 bytes, host order) · `nfgenmsg` (4 bytes:
//! family, version, `res_id` = queue number in network order) · attributes (`nlattr`:
//! u16 length, u16 type, both host order; payloads padded to 4 bytes; the nfqueue payload
//! fields themselves are big-endian).

/// `NETLINK_NETFILTER` protocol number of the socket.
pub const NETLINK_NETFILTER: i32 = 12;
/// `NFNL_SUBSYS_QUEUE`: the subsystem byte of the message type.
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFNETLINK_V0: u8 = 0;

// enum nfqnl_msg_types
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQNL_MSG_VERDICT_BATCH: u16 = 3;

// enum nfqnl_attr_type
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_TIMESTAMP: u16 = 4;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CAP_LEN: u16 = 13;

// enum nfqnl_attr_config
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;

// enum nfqnl_msg_config_cmds
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_CFG_CMD_UNBIND: u8 = 2;

/// `NFQA_CFG_F_FAIL_OPEN`: accept instead of drop when the queue is full. Never set:
/// a full delay line must lose packets visibly (counted in `queue_dropped`).
pub const NFQA_CFG_F_FAIL_OPEN: u32 = 1 << 0;
/// `NFQA_CFG_F_GSO`: queue GSO packets whole and skip the checksum fix-up that a packet
/// copy would otherwise force; the daemon never reads or changes the packet.
pub const NFQA_CFG_F_GSO: u32 = 1 << 2;

/// `enum nfqnl_config_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CopyMode {
    /// Metadata only: no `NFQA_CAP_LEN` either, so the packet length is unknown.
    #[allow(dead_code)]
    Meta = 1,
    Packet = 2,
}

const NLMSG_HDRLEN: usize = 16;
const NFGEN_HDRLEN: usize = 4;
const NLA_HDRLEN: usize = 4;
pub const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
/// `NF_ACCEPT` verdict.
pub const NF_ACCEPT: u32 = 1;

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn msg_type(op: u16) -> u16 {
    (NFNL_SUBSYS_QUEUE << 8) | op
}

/// Builds one message in `buf` (appending): header, `nfgenmsg`, then attributes given
/// as (type, payload). Returns the message length.
fn put_msg(
    buf: &mut Vec<u8>,
    op: u16,
    flags: u16,
    seq: u32,
    queue: u16,
    attrs: &[(u16, &[u8])],
) -> usize {
    let start = buf.len();
    buf.extend_from_slice(&[0; NLMSG_HDRLEN]);
    buf.push(libc::AF_UNSPEC as u8);
    buf.push(NFNETLINK_V0);
    buf.extend_from_slice(&queue.to_be_bytes());
    for (ty, payload) in attrs {
        let len = NLA_HDRLEN + payload.len();
        buf.extend_from_slice(&(len as u16).to_ne_bytes());
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.extend_from_slice(payload);
        buf.resize(buf.len() + align4(len) - len, 0);
    }
    let len = buf.len() - start;
    let hdr = &mut buf[start..start + NLMSG_HDRLEN];
    hdr[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
    hdr[4..6].copy_from_slice(&msg_type(op).to_ne_bytes());
    hdr[6..8].copy_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    hdr[8..12].copy_from_slice(&seq.to_ne_bytes());
    // nlmsg_pid 0: the kernel fills in the sender.
    len
}

/// Queue configuration requested at bind time.
#[derive(Clone, Copy, Debug)]
pub struct QueueConfig {
    pub queue: u16,
    pub copy_mode: CopyMode,
    /// Bytes of each packet copied to the daemon (`NFQNL_COPY_PACKET` only).
    pub copy_range: u32,
    /// `NFQA_CFG_QUEUE_MAXLEN`: packets the kernel holds for this queue before dropping.
    pub maxlen: u32,
}

/// `NFQNL_MSG_CONFIG` with `NFQNL_CFG_CMD_BIND` (asks for an ACK: a queue bound by
/// another process answers `EBUSY`).
pub fn bind(buf: &mut Vec<u8>, seq: u32, queue: u16) -> usize {
    let cmd = [NFQNL_CFG_CMD_BIND, 0, 0, 0];
    put_msg(
        buf,
        NFQNL_MSG_CONFIG,
        NLM_F_ACK,
        seq,
        queue,
        &[(NFQA_CFG_CMD, &cmd)],
    )
}

/// `NFQNL_MSG_CONFIG` with `NFQNL_CFG_CMD_UNBIND`.
pub fn unbind(buf: &mut Vec<u8>, seq: u32, queue: u16) -> usize {
    let cmd = [NFQNL_CFG_CMD_UNBIND, 0, 0, 0];
    put_msg(
        buf,
        NFQNL_MSG_CONFIG,
        NLM_F_ACK,
        seq,
        queue,
        &[(NFQA_CFG_CMD, &cmd)],
    )
}

/// `NFQNL_MSG_CONFIG` setting copy mode, queue length and flags: `GSO` on, `FAIL_OPEN`
/// explicitly off (both bits in the mask, only `GSO` in the value).
pub fn configure(buf: &mut Vec<u8>, seq: u32, cfg: &QueueConfig) -> usize {
    let mut params = [0u8; 5]; // struct nfqnl_msg_config_params is packed: 5 bytes
    params[0..4].copy_from_slice(&cfg.copy_range.to_be_bytes());
    params[4] = cfg.copy_mode as u8;
    let maxlen = cfg.maxlen.to_be_bytes();
    let mask = (NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO).to_be_bytes();
    let flags = NFQA_CFG_F_GSO.to_be_bytes();
    put_msg(
        buf,
        NFQNL_MSG_CONFIG,
        NLM_F_ACK,
        seq,
        cfg.queue,
        &[
            (NFQA_CFG_PARAMS, &params),
            (NFQA_CFG_QUEUE_MAXLEN, &maxlen),
            (NFQA_CFG_MASK, &mask),
            (NFQA_CFG_FLAGS, &flags),
        ],
    )
}

/// `NFQNL_MSG_VERDICT_BATCH`: the verdict applies to every packet of `queue` whose id is
/// not after `last_id` (the kernel compares ids modulo 2^32), i.e. a FIFO prefix.
pub fn verdict_batch(buf: &mut Vec<u8>, seq: u32, queue: u16, last_id: u32, verdict: u32) -> usize {
    let mut hdr = [0u8; 8];
    hdr[0..4].copy_from_slice(&verdict.to_be_bytes());
    hdr[4..8].copy_from_slice(&last_id.to_be_bytes());
    put_msg(
        buf,
        NFQNL_MSG_VERDICT_BATCH,
        0,
        seq,
        queue,
        &[(NFQA_VERDICT_HDR, &hdr)],
    )
}

/// What the daemon needs of one queued packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    pub queue: u16,
    pub id: u32,
    /// Length of the packet as the kernel holds it (IP header onwards): `NFQA_CAP_LEN`
    /// when the copy was truncated, else the copied payload length; 0 in meta mode.
    pub len: u32,
    /// `NFQA_TIMESTAMP` (CLOCK_REALTIME, µs resolution) when the skb carried one.
    pub timestamp_ns: Option<u64>,
}

/// One message received from the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    Packet(Packet),
    /// `NLMSG_ERROR`: `errno` 0 is an ACK. `seq` of the request it answers.
    Error {
        errno: i32,
        seq: u32,
    },
    /// Anything else (`NLMSG_DONE`, noop, unknown types): ignored.
    Other,
}

/// Error for bytes that do not form a valid netlink message.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

fn u16_ne(b: &[u8]) -> u16 {
    u16::from_ne_bytes([b[0], b[1]])
}
fn u32_ne(b: &[u8]) -> u32 {
    u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
}
fn u32_be(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn u64_be(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[0..8].try_into().unwrap())
}

/// Parses every netlink message in one datagram, calling `f` for each.
pub fn parse(datagram: &[u8], mut f: impl FnMut(Message)) -> Result<(), Malformed> {
    let mut rest = datagram;
    while rest.len() >= NLMSG_HDRLEN {
        let len = u32_ne(&rest[0..4]) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(Malformed("nlmsg_len out of range"));
        }
        let ty = u16_ne(&rest[4..6]);
        let seq = u32_ne(&rest[8..12]);
        let body = &rest[NLMSG_HDRLEN..len];
        let msg = if ty == NLMSG_ERROR {
            if body.len() < 4 {
                return Err(Malformed("short NLMSG_ERROR"));
            }
            // struct nlmsgerr: int error (negative errno) + the offending request's header,
            // whose seq tells which request failed.
            let err = i32::from_ne_bytes(body[0..4].try_into().unwrap());
            let req_seq = if body.len() >= 4 + NLMSG_HDRLEN {
                u32_ne(&body[12..16])
            } else {
                seq
            };
            Message::Error {
                errno: -err,
                seq: req_seq,
            }
        } else if ty == NLMSG_DONE || ty != msg_type(NFQNL_MSG_PACKET) {
            Message::Other
        } else {
            Message::Packet(parse_packet(body)?)
        };
        f(msg);
        rest = &rest[align4(len).min(rest.len())..];
    }
    Ok(())
}

fn parse_packet(body: &[u8]) -> Result<Packet, Malformed> {
    if body.len() < NFGEN_HDRLEN {
        return Err(Malformed("short nfgenmsg"));
    }
    let queue = u16::from_be_bytes([body[2], body[3]]);
    let mut attrs = &body[NFGEN_HDRLEN..];
    let (mut id, mut cap_len, mut payload_len, mut timestamp_ns) = (None, None, 0u32, None);
    while attrs.len() >= NLA_HDRLEN {
        let len = u16_ne(&attrs[0..2]) as usize;
        // The top two bits of nla_type are the NESTED/NET_BYTEORDER flags.
        let ty = u16_ne(&attrs[2..4]) & 0x3fff;
        if len < NLA_HDRLEN || len > attrs.len() {
            return Err(Malformed("nla_len out of range"));
        }
        let val = &attrs[NLA_HDRLEN..len];
        match ty {
            // struct nfqnl_msg_packet_hdr { __be32 packet_id; __be16 hw_protocol; __u8 hook; }
            NFQA_PACKET_HDR if val.len() >= 4 => id = Some(u32_be(val)),
            NFQA_CAP_LEN if val.len() >= 4 => cap_len = Some(u32_be(val)),
            NFQA_PAYLOAD => payload_len = val.len() as u32,
            // struct nfqnl_msg_packet_timestamp { __aligned_be64 sec; __aligned_be64 usec; }
            NFQA_TIMESTAMP if val.len() >= 16 => {
                timestamp_ns = Some(u64_be(&val[0..8]) * 1_000_000_000 + u64_be(&val[8..16]) * 1000)
            }
            _ => {}
        }
        attrs = &attrs[align4(len).min(attrs.len())..];
    }
    let id = id.ok_or(Malformed("packet without NFQA_PACKET_HDR"))?;
    Ok(Packet {
        queue,
        id,
        len: cap_len.unwrap_or(payload_len),
        timestamp_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(buf: &mut Vec<u8>, ty: u16, val: &[u8]) {
        let len = NLA_HDRLEN + val.len();
        buf.extend_from_slice(&(len as u16).to_ne_bytes());
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.extend_from_slice(val);
        buf.resize(buf.len() + align4(len) - len, 0);
    }

    /// A packet message laid out as the kernel's `nfqnl_build_packet_message` does.
    fn kernel_packet(
        queue: u16,
        id: u32,
        payload: &[u8],
        cap_len: Option<u32>,
        ts: Option<(u64, u64)>,
    ) -> Vec<u8> {
        let mut body = vec![libc::AF_INET as u8, 0];
        body.extend_from_slice(&queue.to_be_bytes());
        let mut hdr = id.to_be_bytes().to_vec();
        hdr.extend_from_slice(&0x0800u16.to_be_bytes());
        hdr.push(2); // NF_INET_FORWARD
        attr(&mut body, NFQA_PACKET_HDR, &hdr);
        attr(&mut body, 6, &7u32.to_be_bytes()); // NFQA_IFINDEX_OUTDEV, ignored
        if let Some((s, us)) = ts {
            let mut v = s.to_be_bytes().to_vec();
            v.extend_from_slice(&us.to_be_bytes());
            attr(&mut body, NFQA_TIMESTAMP, &v);
        }
        if let Some(c) = cap_len {
            attr(&mut body, NFQA_CAP_LEN, &c.to_be_bytes());
        }
        attr(&mut body, NFQA_PAYLOAD, payload);
        let mut msg = ((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes().to_vec();
        msg.extend_from_slice(&msg_type(NFQNL_MSG_PACKET).to_ne_bytes());
        msg.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        msg.extend_from_slice(&body);
        msg
    }

    #[test]
    fn verdict_batch_layout() {
        let mut buf = Vec::new();
        let n = verdict_batch(&mut buf, 9, 3, 0x01020304, NF_ACCEPT);
        assert_eq!(n, 16 + 4 + 4 + 8);
        assert_eq!(u32_ne(&buf[0..4]) as usize, n);
        assert_eq!(
            u16_ne(&buf[4..6]),
            (3 << 8) | 3,
            "NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_VERDICT_BATCH"
        );
        assert_eq!(u16_ne(&buf[6..8]), NLM_F_REQUEST);
        assert_eq!(u32_ne(&buf[8..12]), 9);
        assert_eq!(
            &buf[16..20],
            &[0, 0, 0, 3],
            "AF_UNSPEC, v0, res_id = queue (big-endian)"
        );
        assert_eq!(u16_ne(&buf[20..22]), 12);
        assert_eq!(u16_ne(&buf[22..24]), NFQA_VERDICT_HDR);
        assert_eq!(&buf[24..28], &[0, 0, 0, 1], "NF_ACCEPT big-endian");
        assert_eq!(&buf[28..32], &[1, 2, 3, 4], "id big-endian");
    }

    #[test]
    fn configure_never_sets_fail_open() {
        let mut buf = Vec::new();
        let cfg = QueueConfig {
            queue: 1,
            copy_mode: CopyMode::Packet,
            copy_range: 20,
            maxlen: 262144,
        };
        let n = configure(&mut buf, 1, &cfg);
        assert_eq!(n, buf.len());
        assert_eq!(u16_ne(&buf[6..8]), NLM_F_REQUEST | NLM_F_ACK);
        // params: 4+5 bytes padded to 12
        assert_eq!(u16_ne(&buf[20..22]), 9);
        assert_eq!(u16_ne(&buf[22..24]), NFQA_CFG_PARAMS);
        assert_eq!(&buf[24..29], &[0, 0, 0, 20, 2]);
        assert_eq!(u16_ne(&buf[34..36]), NFQA_CFG_QUEUE_MAXLEN);
        assert_eq!(u32_be(&buf[36..40]), 262144);
        assert_eq!(u16_ne(&buf[42..44]), NFQA_CFG_MASK);
        assert_eq!(u32_be(&buf[44..48]), NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO);
        assert_eq!(u16_ne(&buf[50..52]), NFQA_CFG_FLAGS);
        let flags = u32_be(&buf[52..56]);
        assert_eq!(
            flags & NFQA_CFG_F_FAIL_OPEN,
            0,
            "a full queue must drop, not bypass"
        );
        assert_eq!(flags, NFQA_CFG_F_GSO);
    }

    #[test]
    fn bind_and_unbind_commands() {
        let mut buf = Vec::new();
        bind(&mut buf, 1, 258);
        assert_eq!(&buf[18..20], &258u16.to_be_bytes());
        assert_eq!(u16_ne(&buf[22..24]), NFQA_CFG_CMD);
        assert_eq!(buf[24], NFQNL_CFG_CMD_BIND);
        let mut buf = Vec::new();
        unbind(&mut buf, 1, 258);
        assert_eq!(buf[24], NFQNL_CFG_CMD_UNBIND);
    }

    #[test]
    fn parses_truncated_copy_with_cap_len() {
        let msg = kernel_packet(5, 77, &[0x45; 20], Some(1500), None);
        let mut got = vec![];
        parse(&msg, |m| got.push(m)).unwrap();
        assert_eq!(
            got,
            vec![Message::Packet(Packet {
                queue: 5,
                id: 77,
                len: 1500,
                timestamp_ns: None
            })]
        );
    }

    #[test]
    fn short_packet_length_is_payload_length() {
        // A packet shorter than the copy range comes whole, without NFQA_CAP_LEN.
        let msg = kernel_packet(0, 1, &[0x45; 17], None, Some((3, 500)));
        let mut got = vec![];
        parse(&msg, |m| got.push(m)).unwrap();
        assert_eq!(
            got,
            vec![Message::Packet(Packet {
                queue: 0,
                id: 1,
                len: 17,
                timestamp_ns: Some(3_000_500_000)
            })]
        );
    }

    #[test]
    fn parses_several_messages_and_errors() {
        let mut d = kernel_packet(0, 1, &[0; 20], Some(60), None);
        d.extend(kernel_packet(0, 2, &[0; 20], Some(1500), None));
        // NLMSG_ERROR with -EBUSY answering request seq 42
        let mut err = 36u32.to_ne_bytes().to_vec();
        err.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err.extend_from_slice(&[0; 10]);
        err.extend_from_slice(&(-libc::EBUSY).to_ne_bytes());
        err.extend_from_slice(&[0; 8]);
        err.extend_from_slice(&42u32.to_ne_bytes());
        err.extend_from_slice(&[0; 4]);
        d.extend(err);
        let mut got = vec![];
        parse(&d, |m| got.push(m)).unwrap();
        assert_eq!(got.len(), 3);
        assert!(matches!(
            got[1],
            Message::Packet(Packet {
                id: 2,
                len: 1500,
                ..
            })
        ));
        assert_eq!(
            got[2],
            Message::Error {
                errno: libc::EBUSY,
                seq: 42
            }
        );
    }

    #[test]
    fn rejects_malformed() {
        let mut msg = kernel_packet(0, 1, &[0; 20], None, None);
        msg[0] = 200; // nlmsg_len beyond the datagram
        assert!(parse(&msg, |_| {}).is_err());
        let mut msg = kernel_packet(0, 1, &[0; 20], None, None);
        msg[20] = 0xff; // first nla_len beyond the message
        msg[21] = 0x00;
        assert!(parse(&msg, |_| {}).is_err());
    }
}
