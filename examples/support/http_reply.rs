//! The HTTP/1.1 protocol of the benchmark servers, shared by `examples/http_server.rs`
//! (greenweave) and `examples/tokio_http_server.rs` (its tokio peer) so that both answer byte
//! for byte the same, and by `tests/http_server.rs`. Included with `#[path]`; not an example.
//!
//! It owns parsing (with `httparse`, what hyper parses with) and the replies; it does no I/O:
//! the caller reads into a buffer, calls [`answer`], writes what it appended, and closes when
//! told to. Every request gets the same fixed small body, `Hello, World!`, with its
//! `Content-Length`; keep-alive is the HTTP/1.1 default, `Connection: close` (or HTTP/1.0
//! without `Connection: keep-alive`) ends the connection after the reply; pipelined requests
//! are answered in order; a request that does not parse gets `400 Bad Request` and the
//! connection closes. Request bodies framed by `Content-Length` are read and ignored; chunked
//! request bodies are not supported (`501`, then close), nor are heads over [`MAX_HEAD`]
//! bytes (`431`) or bodies that do not fit the buffer (`413`).

/// The size of a connection's input buffer: a request's head and body must fit in it.
pub const BUFFER: usize = 16 * 1024;

/// The longest request head (request line and headers) accepted.
pub const MAX_HEAD: usize = 8 * 1024;

/// The most headers a request may have.
const MAX_HEADERS: usize = 32;

/// The body every request gets.
pub const BODY: &[u8] = b"Hello, World!";

// The replies spell out the body's length.
const _: () = assert!(BODY.len() == 13);

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\n";
const OK_KEEP_ALIVE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\
Connection: keep-alive\r\n\r\n";
const OK_CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\
Connection: close\r\n\r\n";

/// What a call of [`answer`] did.
#[derive(Debug, PartialEq, Eq)]
pub struct Answered {
    /// Bytes at the start of the input that the answered requests took; the rest is the start
    /// of a request not complete yet, to keep for the next call.
    pub consumed: usize,
    /// Requests answered (each with one reply appended to the output, error replies included).
    pub requests: u64,
    /// The connection must be closed once the output is written.
    pub close: bool,
}

/// How a request is framed and whether the connection stays open after it.
struct Request {
    head: usize,
    body: usize,
    head_only: bool,
    /// `Some(true)`: the client asked to keep the connection (HTTP/1.0 `keep-alive`);
    /// `Some(false)`: it asked to close it; `None`: HTTP/1.1's default, keep it.
    keep_alive: Option<bool>,
}

/// A request that gets an error reply and then the connection closed.
struct Refused(&'static [u8]);

const BAD_REQUEST: Refused =
    Refused(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
const TOO_LARGE: Refused =
    Refused(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
const HEAD_TOO_LARGE: Refused = Refused(
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n\
Connection: close\r\n\r\n",
);
const NOT_IMPLEMENTED: Refused =
    Refused(b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");

/// Answers every complete request at the start of `input`, in order, appending one reply per
/// request to `output`, and stops at the first incomplete one (or after a request that closes
/// the connection). After a refused request (an error reply), everything is taken as consumed
/// and the connection must close: where the next request would start is unknown.
pub fn answer(input: &[u8], output: &mut Vec<u8>) -> Answered {
    let mut answered = Answered {
        consumed: 0,
        requests: 0,
        close: false,
    };
    loop {
        let rest = &input[answered.consumed..];
        if rest.is_empty() {
            return answered;
        }
        let request = match parse(rest) {
            Ok(Some(request)) => request,
            Ok(None) => return answered, // the rest of the request has not arrived yet
            Err(Refused(reply)) => {
                output.extend_from_slice(reply);
                answered.requests += 1;
                answered.consumed = input.len(); // nothing after a refused request is read
                answered.close = true;
                return answered;
            }
        };
        let (reply, close) = match request.keep_alive {
            None => (OK, false),
            Some(true) => (OK_KEEP_ALIVE, false),
            Some(false) => (OK_CLOSE, true),
        };
        output.extend_from_slice(reply);
        if !request.head_only {
            output.extend_from_slice(BODY);
        }
        answered.consumed += request.head + request.body;
        answered.requests += 1;
        if close {
            answered.close = true;
            return answered;
        }
    }
}

/// Parses the request at the start of `input`: `Ok(None)` when it is not all there yet.
fn parse(input: &[u8]) -> Result<Option<Request>, Refused> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let head = match request.parse(input) {
        Ok(httparse::Status::Complete(head)) if head <= MAX_HEAD => head,
        Ok(httparse::Status::Complete(_)) => return Err(HEAD_TOO_LARGE),
        Ok(httparse::Status::Partial) if input.len() > MAX_HEAD => return Err(HEAD_TOO_LARGE),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HEAD_TOO_LARGE),
        Err(_) => return Err(BAD_REQUEST),
    };
    let http_1_0 = request.version == Some(0);
    let mut keep_alive = if http_1_0 { Some(false) } else { None };
    let mut body = None;
    for header in request.headers.iter() {
        if header.name.eq_ignore_ascii_case("connection") {
            for token in header.value.split(|&byte| byte == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = Some(false);
                } else if token.eq_ignore_ascii_case(b"keep-alive") && http_1_0 {
                    keep_alive = Some(true);
                }
            }
        } else if header.name.eq_ignore_ascii_case("content-length") {
            let length = std::str::from_utf8(header.value)
                .ok()
                .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|text| text.parse::<usize>().ok())
                .ok_or(BAD_REQUEST)?;
            // Two different lengths make the framing ambiguous (RFC 9112, 6.3).
            if body.is_some_and(|earlier| earlier != length) {
                return Err(BAD_REQUEST);
            }
            body = Some(length);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(NOT_IMPLEMENTED);
        }
    }
    let body = body.unwrap_or(0);
    if body > BUFFER - head {
        return Err(TOO_LARGE);
    }
    if input.len() < head + body {
        return Ok(None);
    }
    Ok(Some(Request {
        head,
        body,
        head_only: request.method == Some("HEAD"),
        keep_alive,
    }))
}
