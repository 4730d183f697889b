package core_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/narwhal-io/narwhal/core"
	"github.com/narwhal-io/narwhal/core/controller"
)

// router is an httputil.ReverseProxy that embeds the core: it feeds every
// request's lifecycle to it and picks engines from its role table.
type router struct {
	c       *core.Core
	engines map[string]*url.URL
	next    atomic.Uint64
	proxy   *httputil.ReverseProxy
}

type reqInfo struct {
	arrivalNs, estInput, maxTokens int64
	engine                         string
}

type ctxKey struct{}

func newRouter(c *core.Core, engines map[string]*url.URL) *router {
	r := &router{c: c, engines: engines}
	r.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			ri := pr.In.Context().Value(ctxKey{}).(*reqInfo)
			pr.SetURL(r.engines[ri.engine])
		},
		ModifyResponse: func(resp *http.Response) error {
			ri := resp.Request.Context().Value(ctxKey{}).(*reqInfo)
			first := time.Now().UnixNano() // headers: the first token is out
			r.c.FirstToken(first, ri.arrivalNs)
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				r.c.Failed(time.Now().UnixNano(), ri.arrivalNs, first)
				return err
			}
			var out struct {
				Usage struct {
					CompletionTokens int64 `json:"completion_tokens"`
				} `json:"usage"`
			}
			if json.Unmarshal(body, &out) != nil {
				r.c.Failed(time.Now().UnixNano(), ri.arrivalNs, first)
			} else {
				r.c.Completed(time.Now().UnixNano(), ri.arrivalNs, first, ri.maxTokens, out.Usage.CompletionTokens)
			}
			resp.Body = io.NopCloser(bytes.NewReader(body))
			return nil
		},
	}
	return r
}

func (r *router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	arrival := time.Now().UnixNano()
	r.c.OfferStarted(arrival)
	body, err := io.ReadAll(req.Body)
	if err != nil {
		r.c.OfferAbandoned(time.Now().UnixNano())
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	var in struct {
		MaxTokens int64 `json:"max_tokens"`
	}
	json.Unmarshal(body, &in)
	est := req.ContentLength / 4 // local estimate: 4 bytes per token
	if err := r.c.OfferSized(arrival, est, in.MaxTokens); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	t := r.c.Roles() // lock-free, allocation-free
	if len(t.Prefill) == 0 {
		r.c.Refused(time.Now().UnixNano())
		http.Error(w, "no prefill engine", http.StatusServiceUnavailable)
		return
	}
	engine := t.Prefill[r.next.Add(1)%uint64(len(t.Prefill))]
	r.c.Admitted(time.Now().UnixNano(), engine, est, in.MaxTokens)
	ri := &reqInfo{arrivalNs: arrival, estInput: est, maxTokens: in.MaxTokens, engine: engine}
	req.Body = io.NopCloser(bytes.NewReader(body))
	r.proxy.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), ctxKey{}, ri)))
}

// Example_reverseProxyRouter embeds the core in a reverse-proxy router in
// front of two engines, sends three requests and reads the core's state.
func Example_reverseProxyRouter() {
	engine := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"engine":%q,"usage":{"completion_tokens":12}}`, name)
		}))
	}
	p0, d0 := engine("p0"), engine("d0")
	defer p0.Close()
	defer d0.Close()

	c, err := core.New(core.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	urls := map[string]*url.URL{}
	for id, srv := range map[string]*httptest.Server{"p0": p0, "d0": d0} {
		urls[id], _ = url.Parse(srv.URL)
		role := controller.RolePrefill
		if id == "d0" {
			role = controller.RoleDecode
		}
		c.UpsertEngine(controller.Engine{ID: id, Node: "node-a", Model: "facebook/opt-13b", GPU: "A100-80GB", Role: role, Live: true})
	}
	front := httptest.NewServer(newRouter(c, urls))
	defer front.Close()

	for i := 0; i < 3; i++ {
		body := `{"prompt":"` + string(bytes.Repeat([]byte("x"), 400*(i+1))) + `","max_tokens":` + strconv.Itoa(64) + `}`
		resp, err := http.Post(front.URL, "application/json", bytes.NewBufferString(body))
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(string(b))
	}
	now := time.Now().UnixNano()
	st := c.State(now)
	fmt.Println("arrivals:", st.DemandHistory.Arrivals.Observations,
		"residency:", st.DemandHistory.Residency.Observations,
		"outputs:", st.DemandHistory.Outputs.Observations,
		"pending:", st.DemandHistory.Unsized.Pending)
	fmt.Println("completed:", st.Attainment.ByOutcome["completed"].Total)
	fmt.Println("roles:", c.Roles().Prefill, c.Roles().Decode)
	d := c.Step(now) // Run(ctx) does this every step_s
	fmt.Println("decision:", d.Seq, d.Basis, d.Action)
	// Output:
	// {"engine":"p0","usage":{"completion_tokens":12}}
	// {"engine":"p0","usage":{"completion_tokens":12}}
	// {"engine":"p0","usage":{"completion_tokens":12}}
	// arrivals: 3 residency: 3 outputs: 3 pending: 0
	// completed: 3
	// roles: [p0] [d0]
	// decision: 1 offered_demand hold
}
