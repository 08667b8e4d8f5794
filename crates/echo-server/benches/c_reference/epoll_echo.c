/* Reference for the models bench: the textbook single-threaded C epoll echo server
 * (level-triggered, one read and one write per readiness event, no counters), so that the
 * Rust models' QPS can be read as a ratio to it measured in the same run.
 *
 * Usage: epoll_echo PORT   (0 picks a free port). Prints "echo-server listening on IP:PORT"
 * on stderr when ready, like echo-server. For 12-byte echoes a write never blocks; should one
 * be short, the connection is closed (a reference for this load only, not a general server).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 0;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 4096)) {
        perror("bind/listen");
        return 1;
    }
    socklen_t len = sizeof a;
    getsockname(lfd, (struct sockaddr *)&a, &len);
    fprintf(stderr, "echo-server listening on 127.0.0.1:%d model=c-epoll-lt\n", ntohs(a.sin_port));
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd}, evs[1024];
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    static char buf[16384];
    for (;;) {
        int n = epoll_wait(ep, evs, 1024, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
                if (c >= 0) {
                    ev.events = EPOLLIN;
                    ev.data.fd = c;
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
                }
                continue;
            }
            ssize_t r = read(fd, buf, sizeof buf);
            if (r < 0 && errno == EAGAIN)
                continue;
            if (r <= 0 || write(fd, buf, r) != r)
                close(fd);
        }
    }
}
