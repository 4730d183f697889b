/* Minimal kernel type and helper declarations for liveness.c: only what it
 * reads, marked preserve_access_index so clang emits CO-RE relocations and
 * the loader fixes field offsets against the running kernel's BTF. Written
 * for this program; no vmlinux.h is committed. */
#ifndef NARWHAL_LIVENESS_H
#define NARWHAL_LIVENESS_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef int __s32;
typedef long long __s64;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_RINGBUF = 27,
};

struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

/* possible_net_t: a struct holding the socket's network namespace (with
 * CONFIG_NET_NS, which every distribution kernel has). */
typedef struct {
	struct net *net;
} possible_net_t;

/* struct sock_common's local port (host byte order) and family live in
 * anonymous unions in the kernel; CO-RE matches them by name. */
struct sock_common {
	unsigned short skc_family;
	__u16 skc_num;
	possible_net_t skc_net;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
} __attribute__((preserve_access_index));

struct bpf_raw_tracepoint_args {
	__u64 args[0];
};

struct bpf_pidns_info {
	__u32 pid;
	__u32 tgid;
};

/* helpers by their stable ids (include/uapi/linux/bpf.h) */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)113;
static long (*bpf_get_ns_current_pid_tgid)(__u64 dev, __u64 ino, struct bpf_pidns_info *nsdata, __u32 size) = (void *)120;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size, __u64 flags) = (void *)130;

#define CORE_READ(dst, src) \
	bpf_probe_read_kernel(&(dst), sizeof(dst), __builtin_preserve_access_index(&(src)))

#endif
