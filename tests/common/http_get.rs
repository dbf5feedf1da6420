//! The server side of the HTTP/1.1 GET exchanges the real-client tests make: read one request
//! head, answer with a plain-text body. Shared by `hooks_clients.rs` and
//! `hooks_blocking_clients.rs`, whose servers differ only in how they hold a request.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::{BufRead, Write};

/// One GET request's head, as the test servers need it.
pub struct Get {
    pub path: String,
    /// The client asked to close the connection after this answer.
    pub close: bool,
}

/// Reads one request head (request line and headers) from a keep-alive connection; `None`
/// when the client closed it. Panics, failing the test, on anything but a GET.
pub fn read_get(reader: &mut impl BufRead) -> Option<Get> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap() == 0 {
        return None; // the client closed the connection
    }
    let mut close = false;
    let mut headers = 0;
    loop {
        let mut header = String::new();
        assert_ne!(
            reader.read_line(&mut header).unwrap(),
            0,
            "headers cut short"
        );
        if header == "\r\n" {
            break;
        }
        close |= header.eq_ignore_ascii_case("connection: close\r\n");
        headers += 1;
        assert!(headers < 100, "endless headers");
    }
    let mut words = request_line.split_whitespace();
    assert_eq!(words.next(), Some("GET"), "request line {request_line:?}");
    let path = words.next().expect("a path").to_owned();
    Some(Get { path, close })
}

/// Answers `200 OK` with `body` as plain text, with its `Content-Length`.
pub fn write_ok(mut writer: impl Write, body: &str) {
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    writer.write_all(response.as_bytes()).unwrap();
}
