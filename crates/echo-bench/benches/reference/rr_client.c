/*
 * The C reference client of `cargo bench -p echo-bench --bench reference`: the smallest
 * single-threaded epoll client that does what echo-bench does per request, so that
 * echo-bench's cost per request can be judged against plain C on the same machine, server and
 * run. Modelled on neper's tcp_rr / tcp_crr loop (google/neper): level-triggered epoll, one
 * request of REQ bytes in flight per flow, the reply read in full before the next request.
 *
 *   rr_client HOST PORT FLOWS SECONDS MODE LINGER0
 *     MODE     rr  (long connections: connect once, then request/reply)
 *              crr (short connections: connect, request, reply, close, per request)
 *     LINGER0  1: close with SO_LINGER {1, 0} (RST, no TIME_WAIT, neper's default)
 *              0: plain close(2), the client keeps TIME_WAIT (neper --time-wait)
 *
 * Prints one line: `transactions=N seconds=S user_s=U sys_s=Y errors=E`. The payload is
 * echo-bench's ("hello echo\r\n", 12 bytes) and every reply is compared with it.
 * No latency histogram: the benchmark compares throughput and CPU per request only.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char REQ[] = "hello echo\r\n";
#define REQ_LEN 12

struct flow {
	int fd;
	int got; /* reply bytes read so far; -1 while connecting */
};

static struct sockaddr_in target;
static int epfd, linger0;
static unsigned long long done, errors;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* Opens a non-blocking socket, starts its connect and registers it for writability. */
static void start_connect(struct flow *f)
{
	int one = 1;
	struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = f };

	f->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (f->fd < 0)
		die("socket");
	setsockopt(f->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (linger0) {
		struct linger l = { .l_onoff = 1, .l_linger = 0 };
		setsockopt(f->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	}
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, f->fd, &ev) < 0)
		die("epoll_ctl add");
	if (connect(f->fd, (struct sockaddr *)&target, sizeof(target)) < 0 && errno != EINPROGRESS)
		die("connect");
	f->got = -1;
}

/* Sends one request and waits for the reply (level-triggered EPOLLIN). */
static void send_request(struct flow *f)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = f };

	if (f->got < 0 && epoll_ctl(epfd, EPOLL_CTL_MOD, f->fd, &ev) < 0)
		die("epoll_ctl mod");
	if (write(f->fd, REQ, REQ_LEN) != REQ_LEN)
		die("write");
	f->got = 0;
}

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: %s HOST PORT FLOWS SECONDS rr|crr LINGER0\n", argv[0]);
		return 2;
	}
	int flows = atoi(argv[3]);
	double seconds = atof(argv[4]);
	int short_conns = strcmp(argv[5], "crr") == 0;
	linger0 = atoi(argv[6]);
	target.sin_family = AF_INET;
	target.sin_port = htons(atoi(argv[2]));
	if (flows < 1 || seconds <= 0 || inet_pton(AF_INET, argv[1], &target.sin_addr) != 1) {
		fprintf(stderr, "%s: bad arguments\n", argv[0]);
		return 2;
	}

	epfd = epoll_create1(0);
	if (epfd < 0)
		die("epoll_create1");
	struct flow *fl = calloc(flows, sizeof(*fl));
	for (int i = 0; i < flows; i++)
		start_connect(&fl[i]);

	struct rusage r0, r1;
	getrusage(RUSAGE_SELF, &r0);
	double t0 = now_s(), end = t0 + seconds;
	struct epoll_event evs[1024];
	char buf[REQ_LEN];

	while (now_s() < end) {
		int n = epoll_wait(epfd, evs, 1024, 100);
		for (int i = 0; i < n; i++) {
			struct flow *f = evs[i].data.ptr;
			if (f->got < 0) { /* connected (or failed) */
				int err = 0;
				socklen_t len = sizeof(err);
				getsockopt(f->fd, SOL_SOCKET, SO_ERROR, &err, &len);
				if (err) {
					errors++;
					close(f->fd);
					start_connect(f);
					continue;
				}
				send_request(f);
				continue;
			}
			ssize_t got = read(f->fd, buf + f->got, REQ_LEN - f->got);
			if (got <= 0) {
				if (got < 0 && errno == EAGAIN)
					continue;
				errors++;
				close(f->fd);
				start_connect(f);
				continue;
			}
			f->got += got;
			if (f->got < REQ_LEN)
				continue;
			if (memcmp(buf, REQ, REQ_LEN) != 0)
				errors++;
			else
				done++;
			if (short_conns) {
				close(f->fd);
				start_connect(f);
			} else {
				send_request(f);
			}
		}
	}
	double elapsed = now_s() - t0;
	getrusage(RUSAGE_SELF, &r1);
	double user = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) +
		      (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) / 1e6;
	double sys = (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
		     (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e6;
	printf("transactions=%llu seconds=%.6f user_s=%.6f sys_s=%.6f errors=%llu\n", done,
	       elapsed, user, sys, errors);
	return 0;
}
