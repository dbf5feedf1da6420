//! The hooks' per-fd cache (`sys::fd_state`) when the program goes behind libc's back.
#![cfg(feature = "hooks")]

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, IntoRawFd};

#[test]
fn a_socket_fd_closed_by_a_raw_syscall_and_reused_by_a_pipe_reads_as_the_pipe() {
    greenweave::run(|| {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let reused = socket.into_raw_fd();
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two fds into a live array.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // The socket's number is closed and taken by the pipe's read end in one system call
        // that no hook sees (dup3 closes what the target number held). Not close-then-reuse:
        // another test of this binary, on another thread, could take the freed number between
        // the two (this test failed so in CI when the lowest free number was another).
        // SAFETY: both fds are ours; dup3 closes the socket's file and takes its number.
        let moved = unsafe { libc::syscall(libc::SYS_dup3, fds[0], reused, libc::O_CLOEXEC) };
        assert_eq!(
            moved,
            i64::from(reused),
            "{}",
            std::io::Error::last_os_error()
        );
        // SAFETY: closes the pipe's read end's old number, ours, with the system call itself.
        assert_eq!(unsafe { libc::syscall(libc::SYS_close, fds[0]) }, 0);
        fds[0] = reused;
        // SAFETY: writes 3 bytes from a live buffer to the pipe's write end.
        assert_eq!(unsafe { libc::write(fds[1], b"abc".as_ptr().cast(), 3) }, 3);
        let mut buffer = [0u8; 3];
        // SAFETY: reads into a live buffer of 3 bytes.
        let read = unsafe { libc::read(fds[0], buffer.as_mut_ptr().cast(), 3) };
        assert_eq!(read, 3, "errno {}", std::io::Error::last_os_error());
        assert_eq!(&buffer, b"abc");
        for fd in fds {
            // SAFETY: closes fds we own.
            unsafe { libc::close(fd) };
        }
    });
}

#[test]
fn o_nonblock_set_through_a_duplicate_is_honoured_on_the_original_fd() {
    greenweave::run(|| {
        let (original, mut peer) = std::os::unix::net::UnixStream::pair().unwrap();
        // A first read parks (nothing is there yet): the hooks now know the fd as blocking.
        let first = greenweave::spawn(move || {
            peer.write_all(b"a").unwrap();
            peer
        });
        let mut buffer = [0u8; 1];
        (&original).read_exact(&mut buffer).unwrap();
        let mut peer = first.join().unwrap();
        // try_clone is fcntl(F_DUPFD_CLOEXEC): both fds share one open file description.
        let duplicate = original.try_clone().unwrap();
        assert_ne!(duplicate.as_raw_fd(), original.as_raw_fd());
        duplicate.set_nonblocking(true).unwrap();
        // Had the read parked, this writer would have woken it with data instead.
        let writer = greenweave::spawn(move || {
            greenweave::thread::yield_now();
            peer.write_all(b"x").unwrap();
            peer
        });
        let error = (&original).read(&mut buffer).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::WouldBlock);
        drop(writer.join().unwrap());
    });
}
