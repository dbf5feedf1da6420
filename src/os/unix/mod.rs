//! Unix-specific green I/O, as `std::os::unix`: [`net`] has the Unix-domain sockets.

pub mod net;
