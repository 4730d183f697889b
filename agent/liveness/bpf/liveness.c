// SPDX-License-Identifier: (MIT OR GPL-2.0-only)
/* narwhal-agent liveness probes.
 *
 * sched_process_exit: fires per exiting thread in the exiting task's
 * context; only thread-group leaders (tgid == pid) of watched PIDs are
 * reported. PIDs are resolved in the agent's PID namespace (cfg) so that
 * they match what the agent sees in /proc.
 *
 * inet_sock_set_state: runs in softirq for many transitions (the current
 * task is meaningless), so it is keyed by the socket's network namespace
 * (the inode number of its net namespace, as /proc/<pid>/ns/net shows it)
 * and local port (host byte order): pods on one node listen on the same
 * port in different namespaces. A watch with namespace 0 matches the port
 * in every namespace. Only listener transitions are reported: LISTEN ->
 * CLOSE (the engine stopped accepting) and anything else -> LISTEN (it
 * started; an MPTCP listener also reports LISTEN -> LISTEN, skipped), so
 * accepted connections on the same port do not trigger. An MPTCP listener
 * is two sockets (the MPTCP one and its TCP subflow): each reports. */
#include "liveness.h"

#define TCP_CLOSE 7
#define TCP_LISTEN 10

#define EV_EXIT 1
#define EV_LISTEN_CLOSE 2
#define EV_LISTEN_OPEN 3

struct event {
	__u64 ts_ns;
	__u32 kind;
	__u32 pid;
	__u16 port;
	__u16 family;
	__s32 oldstate;
	__s32 newstate;
	__u32 netns;
};

struct port_key {
	__u32 netns; /* 0: any namespace */
	__u16 port;
	__u16 _pad;
};

struct pidns {
	__u64 dev;
	__u64 ino;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} watched_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct port_key);
	__type(value, __u8);
} watched_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pidns);
} cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} events SEC(".maps");

/* keep struct event and struct port_key in BTF so bpf2go generates their
 * Go twins */
const struct event *unused_event __attribute__((unused));
const struct port_key *unused_port_key __attribute__((unused));

SEC("raw_tracepoint/sched_process_exit")
int on_exit(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 key = 0, pid, tgid;
	struct pidns *ns = bpf_map_lookup_elem(&cfg, &key);
	if (ns && ns->ino) {
		struct bpf_pidns_info info = {};
		if (bpf_get_ns_current_pid_tgid(ns->dev, ns->ino, &info, sizeof(info)))
			return 0; /* not in the agent's namespace */
		pid = info.pid;
		tgid = info.tgid;
	} else {
		__u64 id = bpf_get_current_pid_tgid();
		pid = (__u32)id;
		tgid = id >> 32;
	}
	if (pid != tgid)
		return 0;
	if (!bpf_map_lookup_elem(&watched_pids, &tgid))
		return 0;
	struct event ev = {};
	ev.ts_ns = bpf_ktime_get_ns();
	ev.kind = EV_EXIT;
	ev.pid = tgid;
	bpf_ringbuf_output(&events, &ev, sizeof(ev), 0);
	return 0;
}

SEC("raw_tracepoint/inet_sock_set_state")
int on_sock_state(struct bpf_raw_tracepoint_args *ctx)
{
	struct sock *sk = (struct sock *)ctx->args[0];
	__s32 oldstate = (__s32)ctx->args[1];
	__s32 newstate = (__s32)ctx->args[2];
	__u32 kind;
	if (oldstate == TCP_LISTEN && newstate == TCP_CLOSE)
		kind = EV_LISTEN_CLOSE;
	else if (newstate == TCP_LISTEN && oldstate != TCP_LISTEN)
		kind = EV_LISTEN_OPEN;
	else
		return 0;
	__u16 port = 0, family = 0;
	struct net *net = 0;
	__u32 netns = 0;
	CORE_READ(port, sk->__sk_common.skc_num);
	CORE_READ(net, sk->__sk_common.skc_net.net);
	if (net)
		CORE_READ(netns, net->ns.inum);
	struct port_key key = {.netns = netns, .port = port};
	if (!bpf_map_lookup_elem(&watched_ports, &key)) {
		key.netns = 0;
		if (!bpf_map_lookup_elem(&watched_ports, &key))
			return 0;
	}
	CORE_READ(family, sk->__sk_common.skc_family);
	struct event ev = {};
	ev.ts_ns = bpf_ktime_get_ns();
	ev.kind = kind;
	ev.port = port;
	ev.family = family;
	ev.oldstate = oldstate;
	ev.newstate = newstate;
	ev.netns = netns;
	bpf_ringbuf_output(&events, &ev, sizeof(ev), 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
