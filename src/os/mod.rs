//! OS-specific green I/O, laid out as `std::os`: [`unix::net`] holds the green Unix-domain
//! sockets.

pub mod unix;
