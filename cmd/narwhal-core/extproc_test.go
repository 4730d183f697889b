package main

import (
	"context"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// The binary serves extproc.listen: a request a gateway's Envoy streams
// to it (in observability mode, the token as metadata) reaches the core's
// demand history.
func TestBinaryServesExtProc(t *testing.T) {
	bin := buildBinary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := startBinary(t, bin, "--listen", "127.0.0.1:0", "--agents.required=false", "--extproc.listen", addr)
	defer p.Stop(t)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+restartToken)
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/completions")}}}
	for _, m := range []*extprocv3.ProcessingRequest{
		{ObservabilityMode: true, Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm}}},
		{ObservabilityMode: true, Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(`{"prompt":"hello","max_tokens":16}`), EndOfStream: true}}},
	} {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	var state struct {
		DemandHistory struct {
			Arrivals struct {
				Observations int64 `json:"observations"`
			} `json:"arrivals"`
		} `json:"demand_history"`
	}
	for i := 0; i < 500; i++ {
		p.GetJSON(t, "/v1/state", &state)
		if state.DemandHistory.Arrivals.Observations == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if state.DemandHistory.Arrivals.Observations != 1 {
		t.Fatalf("arrivals observed %d after one request through extproc.listen, want 1", state.DemandHistory.Arrivals.Observations)
	}
	_ = st.CloseSend()
}
