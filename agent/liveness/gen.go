package liveness

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall" -target bpfel,bpfeb -type event -type port_key liveness bpf/liveness.c
