/*
 * Blocking calls as a library built with _FORTIFY_SOURCE makes them: into buffers whose size
 * the compiler knows, with a length it does not, so it calls __recv_chk and __poll_chk instead
 * of recv and poll. Compiled by tests/hooks_c_library.rs with -D_FORTIFY_SOURCE=2 -O2.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

/* recv(2) of up to `length` bytes (at most 16) into a local buffer: the first byte received,
 * or -errno. The compiler emits __recv_chk(fd, buffer, length, 16, 0). */
long c_fortified_recv(int fd, unsigned long length) {
    char buffer[16];
    memset(buffer, 0, sizeof buffer);
    long received = recv(fd, buffer, length, 0);
    return received < 0 ? -errno : (received == 0 ? 0 : (unsigned char)buffer[0]);
}

/* poll(2) for readability of `fd` with `count` entries of a local array of 2 (the rest -1):
 * poll's result, or -errno. The compiler emits __poll_chk. */
int c_fortified_poll(int fd, unsigned long count, int timeout_ms) {
    struct pollfd fds[2] = { { fd, POLLIN, 0 }, { -1, 0, 0 } };
    int ready = poll(fds, count, timeout_ms);
    return ready < 0 ? -errno : ready;
}
