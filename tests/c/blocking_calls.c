/*
 * A stand-in for a shared C library such as libcurl or libpq: it makes blocking calls through
 * libc's dynamic symbols, compiled and loaded by tests/hooks_c_library.rs. Each function
 * returns what libc's call returned, or -errno when that call failed, so the test sees errors
 * exactly.
 */
#define _GNU_SOURCE /* ppoll, accept4, dup3 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* recv(2) into `buffer`: the number of bytes received, or -errno. */
long c_recv(int fd, void *buffer, unsigned long length) {
    ssize_t received = recv(fd, buffer, length, 0);
    return received < 0 ? -errno : received;
}

/* nanosleep(2) for `ms` milliseconds: 0, or -errno. */
int c_nanosleep_ms(int ms) {
    struct timespec duration = { ms / 1000, (long)(ms % 1000) * 1000000L };
    return nanosleep(&duration, NULL) < 0 ? -errno : 0;
}

/* poll(2) on no fds with a timeout of `ms` milliseconds, the C idiom for a sleep: 0, or -errno. */
int c_poll_sleep_ms(int ms) {
    int ready = poll(NULL, 0, ms);
    return ready < 0 ? -errno : ready;
}

/*
 * The functions the hooks define, in the order of `c_hooked_names`: each entry is the address
 * the dynamic linker bound this library's references to, the same lookup that binds its calls.
 */
void *const c_hooked_functions[] = {
    (void *)read, (void *)write, (void *)readv, (void *)writev,
    (void *)recv, (void *)recvfrom, (void *)recvmsg,
    (void *)send, (void *)sendto, (void *)sendmsg,
    (void *)connect, (void *)accept, (void *)accept4, (void *)socket, (void *)close,
    (void *)dup, (void *)dup2, (void *)dup3, (void *)setsockopt, (void *)fcntl, (void *)ioctl,
    (void *)poll, (void *)ppoll, (void *)select,
    (void *)nanosleep, (void *)clock_nanosleep, (void *)usleep, (void *)sleep,
    (void *)getaddrinfo, (void *)gethostbyname,
};

const char *const c_hooked_names[] = {
    "read", "write", "readv", "writev",
    "recv", "recvfrom", "recvmsg",
    "send", "sendto", "sendmsg",
    "connect", "accept", "accept4", "socket", "close",
    "dup", "dup2", "dup3", "setsockopt", "fcntl", "ioctl",
    "poll", "ppoll", "select",
    "nanosleep", "clock_nanosleep", "usleep", "sleep",
    "getaddrinfo", "gethostbyname",
};

const unsigned long c_hooked_count = sizeof c_hooked_functions / sizeof c_hooked_functions[0];
