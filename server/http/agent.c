/* agent.c: HAProxy's agent check (agent.h). */
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http.h"

void ms_agent_line(int state, double kv_usage, int waiting, char *buf, size_t n)
{
	if (state == MS_SERVER_DRAINING) {
		snprintf(buf, n, "drain\n");
		return;
	}
	if (state != MS_SERVER_READY) {
		snprintf(buf, n, "down\n");
		return;
	}
	double free_share = kv_usage >= 0 && kv_usage <= 1 ? 1 - kv_usage : 1;
	int w = (int)(100.0 * free_share / (1.0 + (waiting > 0 ? waiting : 0)) + 0.5);
	snprintf(buf, n, "up ready %d%%\n", w < 1 ? 1 : w > 100 ? 100 : w);
}

static void answer(struct ms_agent *a, int fd)
{
	struct ms_server *s = a->srv;
	int state = atomic_load(&s->state);
	struct ms_engine_stats st = {0};
	if (state == MS_SERVER_READY && s->api.engine)
		ms_engine_get_stats(s->api.engine, &st);
	char line[64];
	ms_agent_line(state, st.kv_usage, st.waiting, line, sizeof(line));
	ssize_t r = send(fd, line, strlen(line), MSG_NOSIGNAL);
	(void)r; /* a checker that left gets nothing */
	close(fd);
}

static void *agent_main(void *arg)
{
	struct ms_agent *a = arg;
	while (!atomic_load(&a->stop)) {
		struct pollfd p = {.fd = a->fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		int c = accept(a->fd, NULL, NULL);
		if (c >= 0)
			answer(a, c);
	}
	return NULL;
}

int ms_agent_start(struct ms_agent *a, struct ms_server *s, const char *host, int port,
		   struct ms_err *err)
{
	memset(a, 0, sizeof(*a));
	a->srv = s;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return ms_err_set(err, -EINVAL, "--agent-port: \"%s\" is not an IPv4 address", host);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 64)) {
		if (fd >= 0)
			close(fd);
		return ms_err_set(err, -EADDRINUSE, "--agent-port: cannot listen on %s:%d", host, port);
	}
	a->fd = fd;
	if (pthread_create(&a->th, NULL, agent_main, a)) {
		close(fd);
		return ms_err_set(err, -EAGAIN, "--agent-port: cannot start its thread");
	}
	a->running = true;
	return 0;
}

void ms_agent_stop(struct ms_agent *a)
{
	if (!a->running)
		return;
	atomic_store(&a->stop, true);
	pthread_join(a->th, NULL);
	close(a->fd);
	a->running = false;
}
