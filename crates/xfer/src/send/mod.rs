//! The send engine: what moves chunks over the data connections, for a push
//! (the client sends) and a pull (the server sends) alike. Neither
//! client.rs nor server.rs owns it; both hand it a source and connections.
//!
//! * `source`: what is sent (a file read by offset, `mem:`, a pipe or a
//!   producer), and the shared source stream-mode senders take chunks from;
//! * `workers`: one sender thread per connection, the stripe split, the
//!   counters and gates they share;
//! * `stripe`, `stream`: the two senders; `frame`: writing one frame (paced
//!   by a gate), and the stall test hook;
//! * `pacing`: the goodput target (`--rate`, `--deadline`) and the pacing
//!   rate of each socket.
//!
//! The connections are one flat list today; several paths, each with its own
//! connections, would be a level above `workers` (a path's share of the
//! chunks), with the senders unchanged.

pub(crate) mod frame;
pub(crate) mod pacing;
pub(crate) mod share;
pub(crate) mod source;
pub(crate) mod stream;
pub(crate) mod stripe;
pub(crate) mod workers;
