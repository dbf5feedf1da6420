//! One keep-alive HTTP/1.1 connection served by a green thread: the I/O half of
//! `examples/http_server.rs`, shared with `tests/http_server.rs` (the protocol is
//! `support/http_reply.rs`, which the including crate declares at its root as `mod
//! http_reply`). Included with `#[path]`; not an example itself.
//!
//! It reads what the client sent, answers every complete request in it with one write (so
//! pipelined requests cost one `write` per batch, in order), and reads again; a read with
//! nothing to read parks only this green thread.

use std::io::{self, Read, Write};
use std::net::Shutdown;

use greenweave::net::TcpStream;

/// How much a closing connection reads and throws away, at most, waiting for the client to
/// close its side (see [`serve_connection`]).
const LINGER_BYTES: usize = 64 * 1024;

/// Serves the requests of one connection until the client closes it or a reply closes it;
/// returns how many requests were answered.
///
/// # Errors
/// Those of reading and writing the socket (a client that resets the connection, for one).
pub fn serve_connection(stream: &TcpStream) -> io::Result<u64> {
    // Small requests and replies: do not let Nagle hold back a reply.
    stream.set_nodelay(true)?;
    let mut io = stream; // Read and Write are implemented for &TcpStream
    let mut input = vec![0_u8; crate::http_reply::BUFFER];
    let mut filled = 0;
    let mut output = Vec::with_capacity(4096);
    let mut served = 0;
    loop {
        let n = io.read(&mut input[filled..])?;
        if n == 0 {
            return Ok(served); // the client closed (a request cut short is dropped)
        }
        filled += n;
        let answered = crate::http_reply::answer(&input[..filled], &mut output);
        served += answered.requests;
        if !output.is_empty() {
            io.write_all(&output)?;
            output.clear();
        }
        if answered.close {
            linger(stream);
            return Ok(served);
        }
        // Keep the start of a request not complete yet; `answer` refuses one that cannot fit.
        input.copy_within(answered.consumed..filled, 0);
        filled -= answered.consumed;
    }
}

/// Closes our side and waits for the client to close its own, reading (and dropping) what it
/// still sends, up to [`LINGER_BYTES`]. Closing a socket with unread input makes Linux send a
/// reset, which can destroy the last reply before the client has read it.
fn linger(stream: &TcpStream) {
    if stream.shutdown(Shutdown::Write).is_err() {
        return;
    }
    let mut io = stream;
    let mut sink = [0_u8; 4096];
    let mut drained = 0;
    while drained < LINGER_BYTES {
        match io.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}
